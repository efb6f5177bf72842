// Package scratch holds the slices and maps that periodic work (a usage
// flush, a report flush) reuses from one round to the next: reuse saves
// allocating them each round, but one sized for a burst of keys must not
// pin that memory for good, so every reviewEvery rounds one far larger
// than those rounds needed is let go.
package scratch

const (
	// reviewEvery is how many rounds pass between reviews of a kept
	// slice's or map's size.
	reviewEvery = 16
	// minKept is the size below which a slice or map is always kept:
	// small ones cost little to hold.
	minKept = 4096
)

// review tracks the most elements the rounds since the last review used.
type review struct {
	peak   int
	rounds int
}

// tooLarge records a round that used n elements of something of size
// size, and at every reviewEvery-th round reports whether size is over
// minKept and more than four times the most those rounds used.
func (r *review) tooLarge(n, size int) bool {
	r.peak = max(r.peak, n)
	r.rounds++
	if r.rounds < reviewEvery {
		return false
	}
	large := size > minKept && size > 4*r.peak
	r.peak, r.rounds = 0, 0
	return large
}

// Buffer keeps a slice between rounds. The zero value is ready.
type Buffer[T any] struct {
	buf []T
	rev review
}

// Get returns the kept slice, emptied and cleared, for this round (nil
// when none is kept).
func (b *Buffer[T]) Get() []T {
	clear(b.buf) // let go of what the last round held
	return b.buf[:0]
}

// Put keeps buf, as this round left it, for the next round's Get; what it
// holds stays the caller's until then. At a review, it is let go instead
// when it is far larger than the rounds since the last review needed.
func (b *Buffer[T]) Put(buf []T) {
	if b.rev.tooLarge(len(buf), cap(buf)) {
		buf = nil
	}
	b.buf = buf
}

// Map keeps a map between rounds. The zero value is ready.
type Map[K comparable, V any] struct {
	m    map[K]V
	size int // the most entries m has held: a cleared map keeps its size
	rev  review
}

// Get returns the kept map, emptied, for this round, or a new one when none
// is kept.
func (m *Map[K, V]) Get() map[K]V {
	if m.m == nil {
		m.m, m.size = make(map[K]V), 0
	}
	clear(m.m)
	return m.m
}

// Put records what this round left in the map Get returned. At a review,
// the map is let go when it is far larger than the rounds since the last
// review needed.
func (m *Map[K, V]) Put() {
	m.size = max(m.size, len(m.m))
	if m.rev.tooLarge(len(m.m), m.size) {
		m.m, m.size = nil, 0
	}
}
