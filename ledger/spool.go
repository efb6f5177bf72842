package ledger

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
)

// ErrSpoolFull is returned by Spool.Put when reports did not fit. The caller
// keeps what did not fit and tries again later; nothing is dropped silently.
var ErrSpoolFull = errors.New("ledger: spool full")

// Spool is a bounded, durable local file of reports waiting for NATS. Reports
// are cumulative, so it keeps only the latest report (highest Seq) per
// (process, key, window): the file is compacted to that set whenever it would
// grow past its bound. The file holds one JSON report per line; a torn last
// line (a crash mid-write) is ignored on open.
//
// A Spool is safe for concurrent use. It starts no goroutines.
type Spool struct {
	path     string
	maxBytes int64

	mu     sync.Mutex // guards the fields below
	f      *os.File
	size   int64                 // bytes in the file
	latest map[spoolKey]spoolRec // what the file means
	live   int64                 // sum of encoded sizes in latest
}

type spoolKey struct {
	process, key string
	start        int64 // unix ns
}

type spoolRec struct {
	r    Report
	line []byte // encoded, with newline
}

func keyOf(r *Report) spoolKey {
	return spoolKey{process: r.ProcessID, key: r.Key, start: r.WindowStart.UnixNano()}
}

// OpenSpool opens (or creates) the spool file at path, bounded to maxBytes,
// and loads the reports it holds.
func OpenSpool(path string, maxBytes int64) (*Spool, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("ledger: spool maxBytes: must be positive, got %d", maxBytes)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("ledger: spool dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("ledger: open spool: %w", err)
	}
	// One process per spool: a second one would corrupt it.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("ledger: spool %s is in use by another process: %w", path, err)
	}
	s := &Spool{path: path, maxBytes: maxBytes, f: f, latest: make(map[spoolKey]spoolRec)}
	if err := s.load(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *Spool) load() error {
	sc := bufio.NewScanner(s.f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var r Report
		if json.Unmarshal(line, &r) != nil || r.Validate() != nil {
			continue // torn or foreign line
		}
		s.putLocked(r, append(bytes.Clone(line), '\n'))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("ledger: read spool: %w", err)
	}
	// Rewrite so that a torn tail does not stay in the middle of the file.
	return s.rewriteLocked()
}

// putLocked merges one report into latest; it reports whether it changed.
func (s *Spool) putLocked(r Report, line []byte) bool {
	k := keyOf(&r)
	old, ok := s.latest[k]
	if ok && old.r.Seq >= r.Seq {
		return false
	}
	if ok {
		s.live -= int64(len(old.line))
	}
	s.latest[k] = spoolRec{r: r, line: line}
	s.live += int64(len(line))
	return true
}

// Put stores reports durably (the file is synced before Put returns). A
// report replacing an older one of the same (process, key, window) always
// fits; a new one fits while the spool holds less than maxBytes. Put stores
// what fits and returns the reports that did not, with ErrSpoolFull.
func (s *Spool) Put(reports []Report) (rejected []Report, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var appendBuf []byte
	for i := range reports {
		r := reports[i]
		line, err := json.Marshal(&r)
		if err != nil {
			return nil, fmt.Errorf("ledger: spool encode: %w", err)
		}
		line = append(line, '\n')
		k := keyOf(&r)
		if _, ok := s.latest[k]; !ok && s.live+int64(len(line)) > s.maxBytes {
			rejected = append(rejected, r)
			continue
		}
		if s.putLocked(r, line) {
			appendBuf = append(appendBuf, line...)
		}
	}
	if len(appendBuf) > 0 {
		if s.size+int64(len(appendBuf)) > s.maxBytes {
			err = s.rewriteLocked()
		} else {
			err = s.appendLocked(appendBuf)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(rejected) > 0 {
		return rejected, ErrSpoolFull
	}
	return nil, nil
}

func (s *Spool) appendLocked(b []byte) error {
	if _, err := s.f.WriteAt(b, s.size); err != nil {
		return fmt.Errorf("ledger: spool write: %w", err)
	}
	s.size += int64(len(b))
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("ledger: spool sync: %w", err)
	}
	return nil
}

// rewriteLocked replaces the file with the latest set (write a temporary
// file, sync, rename, sync the directory).
func (s *Spool) rewriteLocked() error {
	if len(s.latest) == 0 {
		if err := s.f.Truncate(0); err != nil {
			return fmt.Errorf("ledger: spool truncate: %w", err)
		}
		s.size = 0
		return s.f.Sync()
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("ledger: spool compact: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("ledger: spool compact: lock: %w", err)
	}
	w := bufio.NewWriterSize(f, 256*1024)
	var n int64
	for _, rec := range s.latest {
		m, _ := w.Write(rec.line)
		n += int64(m)
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("ledger: spool compact: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		f.Close()
		return fmt.Errorf("ledger: spool compact: %w", err)
	}
	if d, err := os.Open(filepath.Dir(s.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	s.f.Close()
	s.f = f
	s.size = n
	return nil
}

// Pending returns the spooled reports, oldest window first.
func (s *Spool) Pending() []Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Report, 0, len(s.latest))
	for _, rec := range s.latest {
		out = append(out, rec.r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].WindowStart.Equal(out[j].WindowStart) {
			return out[i].WindowStart.Before(out[j].WindowStart)
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Remove forgets reports that were delivered: each removes the spooled
// report of its (process, key, window) unless that one is newer.
func (s *Spool) Remove(delivered []Report) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for i := range delivered {
		k := keyOf(&delivered[i])
		if rec, ok := s.latest[k]; ok && rec.r.Seq <= delivered[i].Seq {
			delete(s.latest, k)
			s.live -= int64(len(rec.line))
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return s.rewriteLocked()
}

// Len returns the number of spooled reports.
func (s *Spool) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.latest)
}

// Bytes returns the size of the spool file.
func (s *Spool) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// Close closes the file; spooled reports stay in it for the next Open.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
