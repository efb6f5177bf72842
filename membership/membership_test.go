package membership

import (
	"fmt"
	"strconv"
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
