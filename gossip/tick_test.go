package gossip

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/partition"
)

// lockstep drives nodes tick by tick on a manual clock, delivering digests
// by hand so that a test decides exactly who hears whom. The nodes do not
// Run (so the clock has no timers to fire): step ticks each node itself.
type lockstep struct {
	t     *testing.T
	clock *clock.Manual
	nodes []*Node
	now   time.Time
}

// newLockstep makes a node per (region, process) of names; the regions of
// names are the region set, unless mod changes it.
func newLockstep(t *testing.T, mod func(*Config), names ...[2]string) *lockstep {
	srv := testserver.StartNATS(t)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ls := &lockstep{t: t, now: time.Unix(1_700_000_000, 0)}
	ls.clock = clock.NewManual(ls.now)
	var regions []string
	for _, rp := range names {
		if !slices.Contains(regions, rp[0]) {
			regions = append(regions, rp[0])
		}
	}
	for _, rp := range names {
		cfg := DefaultConfig()
		cfg.Region, cfg.Process, cfg.Clock, cfg.Regions = rp[0], rp[1], ls.clock, regions
		cfg.TrustRamp = cfg.Interval // trust demand at once
		if mod != nil {
			mod(&cfg)
		}
		n, err := New(nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ls.nodes = append(ls.nodes, n)
	}
	return ls
}

// step records rate cost units per second of demand for key at each node
// (by index), advances the clock one interval, ticks every node, and
// delivers each node's new digest to the nodes hears allows.
func (ls *lockstep) step(key string, rates []float64, hears func(from, to int) bool) {
	iv := DefaultConfig().Interval
	for i, n := range ls.nodes {
		if rates[i] > 0 {
			n.Record([]limit.Usage{{Key: key, Spent: int64(rates[i] * iv.Seconds())}})
		}
	}
	ls.now = ls.now.Add(iv)
	ls.clock.Set(ls.now)
	for _, n := range ls.nodes {
		n.tick(ls.now)
	}
	for i, from := range ls.nodes {
		from.mu.Lock()
		d := from.peers[peerID{from.cfg.Region, from.cfg.Process}].cur
		from.mu.Unlock()
		for j, to := range ls.nodes {
			if i != j && (hears == nil || hears(i, j)) {
				to.store(d, ls.now)
			}
		}
	}
}

func micro(n *Node, key string) int64 { return n.table.Load().micro(key) }

func TestLockstepDeterminismFreezeAndGoodbye(t *testing.T) {
	ls := newLockstep(t, nil, [2]string{"eu", "p1"}, [2]string{"eu", "p2"}, [2]string{"us", "p1"})
	eu1, eu2, us1 := ls.nodes[0], ls.nodes[1], ls.nodes[2]
	for i := 0; i < 20; i++ {
		ls.step("k", []float64{350, 350, 300}, nil)
	}
	// Identical inputs, identical shares: each region's own shares sum to
	// exactly one, and the processes of a region agree.
	if micro(eu1, "k") != micro(eu2, "k") || micro(eu1, "k")+micro(us1, "k") != partition.Micro {
		t.Fatalf("views differ: eu1 %d eu2 %d us1 %d", micro(eu1, "k"), micro(eu2, "k"), micro(us1, "k"))
	}
	if got := eu1.Share("k"); got < 0.69 || got > 0.71 {
		t.Fatalf("eu share %v, want ≈0.7", got)
	}

	// us is cut off: nobody hears across. Everybody freezes at the same
	// tick; shares do not move although demand does.
	// The first tick after the cut still has everyone's digest of the
	// epoch before it; from the next, they are missing.
	cut := func(from, to int) bool { return (from == 2) == (to == 2) }
	ls.step("k", []float64{50, 50, 900}, cut)
	before := []int64{micro(eu1, "k"), micro(eu2, "k"), micro(us1, "k")}
	for i := 0; i < 10; i++ {
		ls.step("k", []float64{50, 50, 900}, cut)
		for j, n := range ls.nodes {
			if !n.Snapshot().Frozen {
				t.Fatalf("step %d: %s/%s not frozen", i, n.cfg.Region, n.cfg.Process)
			}
			if got := micro(n, "k"); got != before[j] {
				t.Fatalf("step %d: %s/%s share moved %d → %d", i, n.cfg.Region, n.cfg.Process, before[j], got)
			}
		}
	}

	// Healed: shares follow demand again, identically everywhere.
	for i := 0; i < 20; i++ {
		ls.step("k", []float64{50, 50, 900}, nil)
	}
	if micro(eu1, "k")+micro(us1, "k") != partition.Micro || us1.Share("k") < 0.85 {
		t.Fatalf("after healing: eu %d us %d", micro(eu1, "k"), micro(us1, "k"))
	}

	// eu/p2 goes silent without goodbye: its region is still heard (p1),
	// so after StaleAfter intervals it is dropped and computation resumes.
	silent := func(from, to int) bool { return from != 1 }
	for i := 0; i < DefaultConfig().StaleAfter+2; i++ {
		ls.step("k", []float64{50, 0, 900}, silent)
	}
	if s := eu1.Snapshot(); s.Frozen {
		t.Fatalf("eu1 still frozen after eu/p2 went silent: %+v", s.Regions)
	}

	// us says goodbye and goes silent: eu keeps computing (a process that
	// said goodbye is not missing), and takes the whole limit once us has
	// been silent for StaleAfter intervals. Before, us keeps what its last
	// digest earns: a goodbye alone takes no share from a region.
	bye := &Digest{Region: "us", Process: "p1", Goodbye: true}
	eu1.store(bye, ls.now)
	gone := func(from, to int) bool { return from == 0 && to != 2 }
	for i := 0; i < DefaultConfig().StaleAfter; i++ {
		ls.step("k", []float64{50, 0, 0}, gone)
		if s := eu1.Snapshot(); s.Frozen || eu1.Share("k") > 0.2 {
			t.Fatalf("step %d after us's goodbye: frozen=%v eu's share %v, want us's last share kept", i, s.Frozen, eu1.Share("k"))
		}
	}
	ls.step("k", []float64{50, 0, 0}, gone)
	if got := eu1.Share("k"); got != 1 {
		t.Fatalf("after us left, eu's share is %v, want 1", got)
	}
}

// TestLockstepWarmUp: until a node has a digest of every configured region
// (or WarmUp intervals have passed), every key gets the configured weights
// split over every configured region, never the whole limit: a node that
// hears nobody does not assume it is alone.
func TestLockstepWarmUp(t *testing.T) {
	tests := []struct {
		name    string
		weights map[string]float64
		regions []string // configured; only eu and us run
		hears   bool     // eu and us hear each other
		// eu's share of a key with demand only at eu: while warming up,
		// and after.
		warm, after float64
	}{
		{"weights, all heard", map[string]float64{"eu": 3, "us": 1}, []string{"eu", "us"}, true, 0.75, 0.95},
		{"equal, all heard", nil, []string{"eu", "us"}, true, 0.5, 0.95},
		{"nobody heard", nil, []string{"eu", "us"}, false, 0.5, 0.95},
		{"a region never up", map[string]float64{"eu": 0.5, "us": 0.3, "ap": 0.2}, []string{"ap", "eu", "us"}, true, 0.5, 0.9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls := newLockstep(t, func(c *Config) { c.Regions, c.Weights = tt.regions, tt.weights },
				[2]string{"eu", "p1"}, [2]string{"us", "p1"})
			eu := ls.nodes[0]
			hears := func(from, to int) bool { return tt.hears }
			if got := eu.Share("k"); got != tt.warm {
				t.Fatalf("before the first tick: share %v, want %v", got, tt.warm)
			}
			// With every region heard, the warm-up ends at the second tick;
			// else after WarmUp ticks.
			warmTicks := eu.cfg.WarmUp
			if tt.hears && len(tt.regions) == 2 {
				warmTicks = 1
			}
			for i := 1; i <= warmTicks; i++ {
				ls.step("k", []float64{1000, 0}, hears)
				if s := eu.Snapshot(); !s.WarmingUp || !s.Frozen || eu.Share("k") != tt.warm {
					t.Fatalf("tick %d: warming=%v frozen=%v share %v, want warming up at %v", i, s.WarmingUp, s.Frozen, eu.Share("k"), tt.warm)
				}
			}
			ls.step("k", []float64{1000, 0}, hears)
			if s := eu.Snapshot(); s.WarmingUp || s.Frozen || len(s.Default) != len(tt.regions) {
				t.Fatalf("after the warm-up: %+v", s)
			}
			// A region counts its own processes from their second digest
			// (ownView): one tick more.
			ls.step("k", []float64{1000, 0}, hears)
			// Demand only at eu: every other configured region keeps its floor.
			if got := eu.Share("k"); !near(got, tt.after, 1e-3) {
				t.Fatalf("after the warm-up: share %v, want %v", got, tt.after)
			}
		})
	}
}

func TestLockstepCrashedRegionFreezesUntilForgotten(t *testing.T) {
	ls := newLockstep(t, nil, [2]string{"eu", "p1"}, [2]string{"us", "p1"})
	eu := ls.nodes[0]
	for i := 0; i < 10; i++ {
		ls.step("k", []float64{500, 500}, nil)
	}
	// us crashes (no goodbye): eu cannot tell it from a partition and keeps
	// its shares, however long it lasts.
	deaf := func(from, to int) bool { return false }
	for i := 0; i < 20; i++ {
		ls.step("k", []float64{900, 0}, deaf)
	}
	if s := eu.Snapshot(); !s.Frozen || eu.Share("k") > 0.51 {
		t.Fatalf("eu after us crashed: frozen=%v share=%v", s.Frozen, eu.Share("k"))
	}
	if age, ok := eu.Age("us"); !ok || age < 20*DefaultConfig().Interval {
		t.Fatalf("age of us: %v %v", age, ok)
	}
	// The operator says us is gone: eu takes the limit.
	eu.Forget("us")
	ls.step("k", []float64{900, 0}, deaf)
	if s := eu.Snapshot(); s.Frozen || eu.Share("k") != 1 {
		t.Fatalf("eu after Forget(us): frozen=%v share=%v", s.Frozen, eu.Share("k"))
	}
}

// TestRunTicksOnIntervalBoundaries drives Run itself with a manual clock:
// it ticks when the clock reaches a multiple of Interval, not before, and
// once per boundary.
func TestRunTicksOnIntervalBoundaries(t *testing.T) {
	srv := testserver.StartNATS(t)
	iv := testInterval
	boundary := time.Unix(1_700_000_000, 0)
	m := clock.NewManual(boundary.Add(iv / 4))
	n := startNode(t, srv.URL, []string{"solo"}, "solo", "p1", func(c *Config) { c.Clock = m })
	warmup := n.Snapshot().ComputedAt

	m.BlockUntil(1) // Run waits for its first tick
	m.Advance(iv*3/4 - time.Nanosecond)
	if s := n.Snapshot(); s.DigestBytes != 0 || !s.ComputedAt.Equal(warmup) {
		t.Fatalf("ticked before the boundary: %+v", s)
	}
	if w := m.Waiters(); w != 1 {
		t.Fatalf("Waiters = %d before the boundary, want Run's timer", w)
	}

	// First tick, at the boundary: the node publishes but only listens.
	m.Advance(time.Nanosecond)
	m.BlockUntil(1) // the tick is done and Run waits for the next
	if s := n.Snapshot(); s.DigestBytes == 0 || !s.Frozen || !s.ComputedAt.Equal(warmup) {
		t.Fatalf("after the first tick: %+v, want a digest published and shares not yet computed", s)
	}

	// Second tick, one interval later: shares computed at that boundary.
	next := boundary.Add(2 * iv)
	m.Advance(iv)
	m.BlockUntil(1)
	if s := n.Snapshot(); s.Frozen || !s.ComputedAt.Equal(next) {
		t.Fatalf("after the second tick: frozen=%v computed at %v, want %v", s.Frozen, s.ComputedAt, next)
	}
	if got := n.Share("k"); got != 1 {
		t.Fatalf("solo share %v, want 1", got)
	}

	// Stop ends Run's timer with it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if w := m.Waiters(); w != 0 {
		t.Fatalf("Waiters = %d after Stop, want 0", w)
	}
}
