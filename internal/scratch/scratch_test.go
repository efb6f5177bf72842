package scratch

import "testing"

func TestReuse(t *testing.T) {
	for _, tt := range []struct {
		name     string
		len, cap int
		kept     bool
	}{
		{"small, nearly empty", 1, 100, true},
		{"small limit", 0, minKept, true},
		{"large, well used", 5000, 8000, true},
		{"large, a quarter used", 2500, 10000, true},
		{"large, under a quarter used", 2499, 10000, false},
		{"large, empty", 0, minKept + 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]*int, tt.len, tt.cap)
			for i := range buf {
				buf[i] = new(int)
			}
			got := Reuse(buf)
			if kept := got != nil; kept != tt.kept {
				t.Fatalf("kept %v, want %v", kept, tt.kept)
			}
			if got == nil {
				return
			}
			if len(got) != 0 || cap(got) != tt.cap {
				t.Fatalf("len %d cap %d, want 0 and %d", len(got), cap(got), tt.cap)
			}
			for i, p := range buf {
				if p != nil {
					t.Fatalf("element %d still held", i)
				}
			}
		})
	}
}
