package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func spoolReport(key string, seq int64) Report {
	r := validReport()
	r.Key, r.Seq, r.Spent = key, seq, seq
	r.Degraded = 0
	return r
}

func TestSpoolKeepsLatestPerWindow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	s, err := OpenSpool(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		put  []Report
		want map[string]int64 // key → seq
	}{
		{[]Report{spoolReport("a", 1), spoolReport("b", 1)}, map[string]int64{"a": 1, "b": 1}},
		{[]Report{spoolReport("a", 3)}, map[string]int64{"a": 3, "b": 1}},
		{[]Report{spoolReport("a", 2)}, map[string]int64{"a": 3, "b": 1}}, // older: ignored
	}
	for i, st := range steps {
		if rej, err := s.Put(st.put); err != nil || len(rej) != 0 {
			t.Fatalf("step %d: Put = %v, %v", i, rej, err)
		}
		checkSpool(t, s, st.want)
	}
	// Durable: reopen.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenSpool(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkSpool(t, s, map[string]int64{"a": 3, "b": 1})
	// Remove: an older delivery does not remove a newer report.
	if err := s.Remove([]Report{spoolReport("a", 2), spoolReport("b", 1)}); err != nil {
		t.Fatal(err)
	}
	checkSpool(t, s, map[string]int64{"a": 3})
	if err := s.Remove([]Report{spoolReport("a", 3)}); err != nil {
		t.Fatal(err)
	}
	checkSpool(t, s, map[string]int64{})
	if s.Bytes() != 0 {
		t.Fatalf("empty spool holds %d bytes", s.Bytes())
	}
}

func TestSpoolTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	s, err := OpenSpool(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put([]Report{spoolReport("a", 1)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"key":"b","window_st`) // crash mid-write
	f.Close()
	s, err = OpenSpool(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkSpool(t, s, map[string]int64{"a": 1})
}

func TestSpoolBounded(t *testing.T) {
	r := spoolReport("k0", 1)
	b, _ := r.Encode()
	per := int64(len(b) + 8)
	s, err := OpenSpool(filepath.Join(t.TempDir(), "spool.jsonl"), 10*per)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var reps []Report
	for i := range 20 {
		reps = append(reps, spoolReport("k"+string(rune('a'+i)), 1))
	}
	rej, err := s.Put(reps)
	if !errors.Is(err, ErrSpoolFull) || len(rej) == 0 || s.Len()+len(rej) != 20 {
		t.Fatalf("Put over the bound: %d stored, %d rejected, err %v", s.Len(), len(rej), err)
	}
	// Replacing stored reports always fits, many times over, and the file
	// stays bounded by compaction.
	stored := s.Pending()
	for seq := int64(2); seq < 50; seq++ {
		for i := range stored {
			stored[i].Seq = seq
		}
		if rej, err := s.Put(stored); err != nil || len(rej) != 0 {
			t.Fatalf("replace: %v, %v", rej, err)
		}
		if s.Bytes() > 10*per+per {
			t.Fatalf("spool file %d bytes, bound %d", s.Bytes(), 10*per)
		}
	}
}

func checkSpool(t *testing.T, s *Spool, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for _, r := range s.Pending() {
		got[r.Key] = r.Seq
	}
	if len(got) != len(want) {
		t.Fatalf("spool holds %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("spool holds %v, want %v", got, want)
		}
	}
}

func TestSpoolIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	s, err := OpenSpool(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSpool(path, 1<<20); err == nil {
		t.Fatal("a second OpenSpool of the same file succeeded")
	}
	// Still exclusive after a compaction replaced the file.
	if _, err := s.Put([]Report{spoolReport("a", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove([]Report{spoolReport("b", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put([]Report{spoolReport("b", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove([]Report{spoolReport("b", 1)}); err != nil { // rewrites
		t.Fatal(err)
	}
	if _, err := OpenSpool(path, 1<<20); err == nil {
		t.Fatal("a second OpenSpool after compaction succeeded")
	}
	s.Close()
	s2, err := OpenSpool(path, 1<<20)
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	checkSpool(t, s2, map[string]int64{"a": 1})
	s2.Close()
}

func TestReporterIncarnation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProcessID = "host-1"
	cfg.SpoolDir = t.TempDir()
	r, err := NewReporter(fakeJS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(t.Context())
	if id := r.ProcessID(); len(id) <= len("host-1@") || id[:7] != "host-1@" {
		t.Fatalf("ProcessID = %q, want host-1@<incarnation>", id)
	}
}

// fakeJS is a JetStream that is never connected.
type fakeJS struct{ jetstream.JetStream }

func (fakeJS) Conn() *nats.Conn { return nil }

// A compaction that cannot write its new file (here the disk is full: the
// file is /dev/full) fails, and the spool keeps what it held: the old file
// is not replaced by a short one.
func TestSpoolCompactionFailureKeepsTheSpool(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	s, err := OpenSpool(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put([]Report{spoolReport("a", 1), spoolReport("b", 1), spoolReport("c", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", path+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove([]Report{spoolReport("a", 1)}); err == nil {
		t.Fatal("a compaction onto a full disk succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path + ".tmp"); err != nil {
		t.Fatal(err)
	}
	s, err = OpenSpool(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkSpool(t, s, map[string]int64{"a": 1, "b": 1, "c": 1})
}
