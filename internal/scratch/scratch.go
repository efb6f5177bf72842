// Package scratch decides whether a buffer reused between rounds of
// periodic work (a usage flush, a report flush) is kept for the next round:
// reuse saves allocating it each round, but a buffer sized for one burst of
// keys must not pin that memory for good.
package scratch

// minKept is the capacity below which a buffer is always kept: small
// buffers cost little to hold.
const minKept = 4096

// Reuse returns buf emptied and cleared for the next round, or nil when its
// capacity is over minKept and more than four times what this round used
// (len(buf)), so that the next round allocates one of its own size.
func Reuse[T any](buf []T) []T {
	if cap(buf) > minKept && cap(buf) > 4*len(buf) {
		return nil
	}
	clear(buf) // let go of what it held until it is refilled
	return buf[:0]
}
