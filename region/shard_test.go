package region

import (
	"testing"
	"time"
)

// TestShardHotEntry: the entry a shard found last is found again without
// the map, and leaves with its key when the key is evicted.
func TestShardHotEntry(t *testing.T) {
	s := &shard{keys: map[string]*entry{}, max: 1}
	a := s.insertLocked("a", time.Minute)
	steps := []struct {
		name string
		do   func()
		key  string
		want *entry
	}{
		{"found", func() {}, "a", a},
		{"found again", func() {}, "a", a},
		{"other key", func() {}, "b", nil},
		{"evicted", func() { s.insertLocked("b", time.Minute) }, "a", nil},
	}
	for _, st := range steps {
		st.do()
		if got := s.getLocked(uint64(len(st.key)), st.key); got != st.want {
			t.Fatalf("%s: getLocked(%q) = %p, want %p", st.name, st.key, got, st.want)
		}
	}
	if s.hot == a {
		t.Fatal("the evicted entry is still the shard's hot entry")
	}
}
