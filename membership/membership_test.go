package membership

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/quotaplatform/quota/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, name string, join []string, onChange func(int)) *Membership {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.Join = join
	cfg.OnChange = onChange
	cfg.Tune = func(c *memberlist.Config) {
		// Detect a killed member in well under a second.
		c.ProbeInterval = 50 * time.Millisecond
		c.ProbeTimeout = 25 * time.Millisecond
		c.SuspicionMult = 1
		c.GossipInterval = 20 * time.Millisecond
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	return m
}

func waitCount(t *testing.T, want int, ms ...*Membership) {
	t.Helper()
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, m := range ms {
			if got := m.Processes(); got != want {
				return fmt.Errorf("%s counts %d processes, want %d", m.cfg.NodeName, got, want)
			}
		}
		return nil
	})
}

func TestCountFollowsJoinsLeavesAndKills(t *testing.T) {
	var changes atomic.Int64
	a := start(t, "a", nil, func(int) { changes.Add(1) })
	if got := a.Processes(); got != 1 {
		t.Fatalf("alone: %d", got)
	}
	b := start(t, "b", []string{a.Addr()}, nil)
	c := start(t, "c", []string{b.Addr()}, nil)
	waitCount(t, 3, a, b, c)
	if changes.Load() == 0 {
		t.Fatal("OnChange was not called")
	}

	// A clean leave.
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	waitCount(t, 2, a, b)

	// A kill: shut down without leaving; the others declare it dead.
	d := start(t, "d", []string{a.Addr()}, nil)
	waitCount(t, 3, a, b, d)
	d.mu.Lock()
	list := d.list
	d.list = nil
	d.mu.Unlock()
	_ = list.Shutdown()
	waitCount(t, 2, a, b)
}

func TestProcessesIsAtLeastOne(t *testing.T) {
	m, err := New(Config{NodeName: "x", BindAddr: "127.0.0.1", LeaveTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Processes(); got != 1 {
		t.Fatalf("before Start: %d", got)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no name", Config{BindAddr: "127.0.0.1", LeaveTimeout: time.Second}},
		{"no addr", Config{NodeName: "x", LeaveTimeout: time.Second}},
		{"bad port", Config{NodeName: "x", BindAddr: "127.0.0.1", BindPort: 70000, LeaveTimeout: time.Second}},
		{"no leave timeout", Config{NodeName: "x", BindAddr: "127.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, _, err := SplitHostPort("nope"); err == nil {
		t.Fatal("SplitHostPort accepted nope")
	}
	if h, p, err := SplitHostPort("10.0.0.1:7946"); err != nil || h != "10.0.0.1" || p != 7946 {
		t.Fatalf("SplitHostPort: %v %v %v", h, p, err)
	}
}

// TestJoinRetriesUntilAPeerAppears: the first process of a region finds
// nobody to join, runs alone, and joins once a peer is up.
func TestJoinRetriesUntilAPeerAppears(t *testing.T) {
	port := testserver.FreePort(t)
	peer := "127.0.0.1:" + strconv.Itoa(port)
	a := start(t, "a", []string{peer}, nil)
	if n := a.Processes(); n != 1 {
		t.Fatalf("alone: %d processes", n)
	}
	cfg := DefaultConfig()
	cfg.NodeName, cfg.BindAddr, cfg.BindPort = "b", "127.0.0.1", port
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop() })
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := a.Processes(); n != 2 {
			return fmt.Errorf("a counts %d processes", n)
		}
		return nil
	})
}

// syncBuffer is a log sink shared by memberlist's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startKeyed starts a member with keys whose log, memberlist's debug lines
// included, goes to log.
func startKeyed(t *testing.T, name string, join []string, keys []Key, log io.Writer) *Membership {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeName, cfg.Join, cfg.Keys = name, join, keys
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Tune = func(c *memberlist.Config) {
		c.ProbeInterval = 50 * time.Millisecond
		c.GossipInterval = 20 * time.Millisecond
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	return m
}

// TestKeysDecideWhoIsCounted: with --memberlist-key, a process joins and is
// counted only if it shares a key with the region's members; one without
// the key, with another key, or with a key where the others have none is
// refused at its join, runs alone, and nobody counts it. Keys never reach
// the log.
func TestKeysDecideWhoIsCounted(t *testing.T) {
	k1 := Key(bytes.Repeat([]byte{0x11}, 32))
	k2 := Key(bytes.Repeat([]byte{0x22}, 16))
	tests := []struct {
		name    string
		members []Key // keys of the two members already counting each other
		joiner  []Key
		joins   bool
	}{
		{"same key", []Key{k1}, []Key{k1}, true},
		{"rotation: old key first, new key second", []Key{k1}, []Key{k1, k2}, true},
		{"no key", []Key{k1}, nil, false},
		{"another key", []Key{k1}, []Key{k2}, false},
		{"a key where the others have none", nil, []Key{k1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log syncBuffer
			a := startKeyed(t, "a", nil, tt.members, &log)
			b := startKeyed(t, "b", []string{a.Addr()}, tt.members, &log)
			waitCount(t, 2, a, b)
			c := startKeyed(t, "c", []string{a.Addr()}, tt.joiner, &log)
			if tt.joins {
				waitCount(t, 3, a, b, c)
			} else {
				// Start joins synchronously: its join has been refused.
				if !strings.Contains(log.String(), "join failed") {
					t.Fatalf("c's join was not refused; log:\n%s", log.String())
				}
				if na, nb, nc := a.Processes(), b.Processes(), c.Processes(); na != 2 || nb != 2 || nc != 1 {
					t.Fatalf("counts a=%d b=%d c=%d, want 2, 2 and c alone", na, nb, nc)
				}
			}
			for _, k := range []Key{k1, k2} {
				for _, enc := range []string{string(k), base64.StdEncoding.EncodeToString(k)} {
					if strings.Contains(log.String(), enc) {
						t.Fatalf("a key is in the log:\n%s", log.String())
					}
				}
			}
		})
	}
}

func TestParseKeys(t *testing.T) {
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, n)) }
	tests := []struct {
		in   string
		keys int // -1: an error
	}{
		{"", 0},
		{b64(16), 1},
		{b64(24), 1},
		{b64(32), 1},
		{b64(32) + ", " + b64(16), 2},
		{b64(15), -1},
		{b64(33), -1},
		{"not base64!", -1},
		{b64(32) + ",", -1},
		{base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 16)), -1}, // no padding
	}
	for _, tt := range tests {
		keys, err := ParseKeys(tt.in)
		if tt.keys < 0 {
			if err == nil {
				t.Errorf("ParseKeys(%q) accepted", tt.in)
			} else if tt.in != "" && strings.Contains(err.Error(), strings.Split(tt.in, ",")[0]) {
				t.Errorf("ParseKeys(%q): error %q shows the key", tt.in, err)
			}
			continue
		}
		if err != nil || len(keys) != tt.keys {
			t.Errorf("ParseKeys(%q) = %d keys, %v; want %d", tt.in, len(keys), err, tt.keys)
		}
	}
	cfg := DefaultConfig()
	cfg.NodeName = "x"
	cfg.Keys = []Key{Key("0123456789abcdef")}
	if s := fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg.Keys); strings.Contains(s, "0123456789abcdef") {
		t.Fatalf("a Config prints its key: %s", s)
	}
	cfg.Keys = []Key{Key("short")}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "config Keys[0]") {
		t.Fatalf("New with a 5-byte key: %v", err)
	}
}
