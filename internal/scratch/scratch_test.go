package scratch

import "testing"

// A kept slice survives rounds that use a fair part of it, and goes at the
// first review after rounds that used under a quarter of it; small ones
// always stay. What a round held is cleared before the next uses it.
func TestBuffer(t *testing.T) {
	for _, tt := range []struct {
		name   string
		size   int   // the slice's capacity
		rounds []int // elements each round used
		kept   bool  // after the rounds
	}{
		{"small, barely used", 100, repeat(1, reviewEvery), true},
		{"large, well used", 10000, repeat(5000, reviewEvery), true},
		{"large, one busy round among idle ones", 10000, append(repeat(10, reviewEvery-1), 9000), true},
		{"large, a quarter used", 10000, repeat(2500, reviewEvery), true},
		{"large, under a quarter used", 10000, repeat(2499, reviewEvery), false},
		{"large, idle, before the review", 10000, repeat(0, reviewEvery-1), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b Buffer[*int]
			b.buf = make([]*int, 0, tt.size)
			for _, n := range tt.rounds {
				buf := b.Get()
				for range n {
					buf = append(buf, new(int))
				}
				b.Put(buf)
			}
			held := b.buf
			got := b.Get()
			if kept := got != nil; kept != tt.kept {
				t.Fatalf("kept %v, want %v", kept, tt.kept)
			}
			if got == nil {
				return
			}
			if len(got) != 0 || cap(got) != tt.size {
				t.Fatalf("len %d cap %d, want 0 and %d", len(got), cap(got), tt.size)
			}
			for i, p := range held {
				if p != nil {
					t.Fatalf("element %d of the last round still held", i)
				}
			}
		})
	}
}

// A kept map is emptied for each round, survives a review of rounds one
// of which filled it, and goes at the review after rounds that filled
// under a quarter of the most it held.
func TestMap(t *testing.T) {
	var m Map[int, int]
	fill := func(n int) {
		mm := m.Get()
		if len(mm) != 0 {
			t.Fatalf("a round starts with %d entries", len(mm))
		}
		for i := range n {
			mm[i] = i
		}
		m.Put()
	}
	fill(20000)
	for range reviewEvery - 1 {
		fill(100)
	}
	if m.m == nil {
		t.Fatal("a map one round of the review filled was let go")
	}
	for range reviewEvery {
		fill(100)
	}
	if m.m != nil {
		t.Fatal("a map of 20,000 entries kept after a review of rounds of 100")
	}
	if fill(100); m.m == nil || m.size != 100 {
		t.Fatalf("the round after: a map of %d entries at most, want a new one of 100", m.size)
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}
