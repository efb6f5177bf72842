package region

import (
	"testing"
	"unsafe"
)

// The per-key state stays within its budget (see entry): a field added to
// entry must take the place of another.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n > 112 {
		t.Fatalf("entry is %d bytes, its budget 112", n)
	}
}
