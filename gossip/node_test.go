package gossip

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/partition"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testInterval = 100 * time.Millisecond

// euUS is the region set of the two-region tests.
var euUS = []string{"eu", "us"}

// startNode starts process proc of region reg, one of regions, on a NATS
// server.
func startNode(t *testing.T, url string, regions []string, reg, proc string, mod func(*Config)) *Node {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Region, cfg.Process, cfg.Regions = reg, proc, regions
	cfg.Interval = testInterval
	cfg.HalfLife = testInterval
	if mod != nil {
		mod(&cfg)
	}
	n, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Error(err)
		}
		nc.Close()
	})
	return n
}

// feeder records usage into nodes at set rates (cost units per second per
// node and key) every 10 ms, until stopped: a load generator, not a
// synchroniser.
type feeder struct {
	mu    sync.Mutex
	rates map[*Node]map[string]float64 // guarded by mu
	owed  map[*Node]map[string]float64 // fractional cost carried over; guarded by mu
	stop  chan struct{}
	done  chan struct{}
}

func startFeeder(t *testing.T) *feeder {
	f := &feeder{rates: map[*Node]map[string]float64{}, owed: map[*Node]map[string]float64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	t.Cleanup(func() { close(f.stop); <-f.done })
	return f
}

func (f *feeder) set(n *Node, key string, rate float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rates[n] == nil {
		f.rates[n], f.owed[n] = map[string]float64{}, map[string]float64{}
	}
	f.rates[n][key] = rate
}

func (f *feeder) run() {
	defer close(f.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-f.stop:
			return
		case now := <-tick.C:
			dt := now.Sub(last).Seconds()
			last = now
			f.mu.Lock()
			for n, keys := range f.rates {
				var batch []limit.Usage
				for key, rate := range keys {
					f.owed[n][key] += rate * dt
					c := int64(f.owed[n][key])
					f.owed[n][key] -= float64(c)
					if c > 0 {
						batch = append(batch, limit.Usage{Key: key, Spent: c})
					}
				}
				n.Record(batch)
			}
			f.mu.Unlock()
		}
	}
}

// ready waits until every node computes (not frozen) with all regions.
func ready(t *testing.T, regions int, nodes ...*Node) {
	t.Helper()
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, n := range nodes {
			s := n.Snapshot()
			if s.Frozen || len(s.Default) != regions {
				return fmt.Errorf("%s/%s: frozen=%v regions=%v", s.Region, s.Process, s.Frozen, s.Default)
			}
		}
		return nil
	})
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// ownSum is the sum over nodes (one per region) of each node's own share.
func ownSum(key string, nodes ...*Node) float64 {
	var s float64
	for _, n := range nodes {
		s += n.Share(key)
	}
	return s
}

func TestSingleRegionShareIsOne(t *testing.T) {
	nats := testserver.StartNATS(t)
	n := startNode(t, nats.URL, []string{"solo"}, "solo", "p1", nil)
	if got := n.Share("k"); got != 1 {
		t.Fatalf("warm-up share %v, want 1", got)
	}
	ready(t, 1, n)
	if got := n.Share("k"); got != 1 {
		t.Fatalf("share %v, want 1", got)
	}
}

func TestNoDataGetsHistoricalWeights(t *testing.T) {
	c := testserver.StartNATSCluster(t, "ap", "eu", "us")
	w := map[string]float64{"eu": 0.5, "us": 0.3, "ap": 0.2}
	var nodes []*Node
	for _, r := range c.Regions() {
		nodes = append(nodes, startNode(t, c.URL(r), c.Regions(), r, "p1", func(c *Config) { c.Weights = w }))
	}
	// Warming up, a node counts every configured region at its weight:
	// ap holds its 0.2, not the floor and not the whole limit.
	if got := nodes[0].Share("k"); nodes[0].cfg.Region != "ap" || got != 0.2 {
		t.Fatalf("%s's warm-up share %v, want ap's weight 0.2", nodes[0].cfg.Region, got)
	}
	ready(t, 3, nodes...)
	for _, n := range nodes {
		for r, want := range w {
			if got := n.Shares("never-seen")[r]; !near(got, want, 1e-6) {
				t.Fatalf("%s sees %s's share %v, want %v", n.cfg.Region, r, got, want)
			}
		}
	}
}

// converge waits until every node's view of key matches want, and returns
// how long that took.
func converge(t *testing.T, key string, want map[string]float64, tol float64, timeout time.Duration, nodes ...*Node) time.Duration {
	t.Helper()
	start := time.Now()
	testserver.WaitFor(t, timeout, 5*time.Millisecond, func() error {
		for _, n := range nodes {
			got := n.Shares(key)
			for r, w := range want {
				if !near(got[r], w, tol) {
					return fmt.Errorf("%s/%s sees %v, want %v", n.cfg.Region, n.cfg.Process, got, want)
				}
			}
		}
		return nil
	})
	return time.Since(start)
}

func TestSkewConvergesFollowsAndFreezes(t *testing.T) {
	c := testserver.StartNATSCluster(t, "ap", "eu", "us")
	nodes := map[string]*Node{}
	var all []*Node
	var mu sync.Mutex
	changed := map[string]int{}
	for _, r := range c.Regions() {
		r := r
		n := startNode(t, c.URL(r), c.Regions(), r, "p1", func(c *Config) {
			c.OnChange = func(key string) { mu.Lock(); changed[r+"/"+key]++; mu.Unlock() }
		})
		nodes[r] = n
		all = append(all, n)
	}
	ready(t, 3, all...)
	f := startFeeder(t)

	// Skewed demand 70/20/10: shares converge within 5 intervals, counted
	// from the first tick after demand starts.
	firstTick := time.Now().Truncate(testInterval).Add(testInterval)
	f.set(nodes["eu"], "k", 700)
	f.set(nodes["us"], "k", 200)
	f.set(nodes["ap"], "k", 100)
	converge(t, "k", map[string]float64{"eu": 0.7, "us": 0.2, "ap": 0.1}, 0.02, 5*time.Second, all...)
	// Count intervals by the tick that computed the converged shares, not
	// by wall time, so that a loaded machine does not fail the test.
	var last time.Time
	for _, n := range all {
		if at := n.Snapshot().ComputedAt; at.After(last) {
			last = at
		}
	}
	ticks := math.Round(float64(last.Sub(firstTick)) / float64(testInterval))
	t.Logf("skew 70/20/10 converged %v intervals after the first tick", ticks)
	if ticks > 5 {
		t.Fatalf("converged after %v intervals, want ≤ 5", ticks)
	}
	if s := ownSum("k", all...); s > 1+1e-9 {
		t.Fatalf("own shares sum to %v", s)
	}
	mu.Lock()
	if changed["eu/k"] == 0 {
		t.Errorf("OnChange was not called for eu/k")
	}
	// The snapshot counts every call (only key k has demand); a tick may
	// have counted one more and be waiting for mu to call OnChange.
	if got, calls := nodes["eu"].Snapshot().ShareChanges, uint64(changed["eu/k"]); got != calls && got != calls+1 {
		t.Errorf("ShareChanges = %d, OnChange was called %d times", got, calls)
	}
	mu.Unlock()

	// Demand moves from eu to ap: shares follow.
	f.set(nodes["eu"], "k", 100)
	f.set(nodes["ap"], "k", 700)
	took := converge(t, "k", map[string]float64{"eu": 0.1, "us": 0.2, "ap": 0.7}, 0.02, 5*time.Second, all...)
	t.Logf("demand move eu→ap followed in %v (%.1f intervals)", took, float64(took)/float64(testInterval))

	// ap is cut off: everybody freezes on the same shares, even while
	// demand keeps moving, and the own shares still sum to 1.
	c.Cut(t, "ap")
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		for _, n := range all {
			if !n.Snapshot().Frozen {
				return fmt.Errorf("%s not frozen", n.cfg.Region)
			}
		}
		return nil
	})
	frozen := map[string]float64{}
	for r, n := range nodes {
		frozen[r] = n.Share("k")
	}
	f.set(nodes["eu"], "k", 900)
	f.set(nodes["ap"], "k", 10)
	deadline := time.Now().Add(10 * testInterval)
	for time.Now().Before(deadline) {
		for r, n := range nodes {
			if got := n.Share("k"); got != frozen[r] {
				t.Fatalf("%s's share moved during the partition: %v → %v", r, frozen[r], got)
			}
		}
		// The regions may have frozen one tick apart (a digest that crossed
		// to some just as the link was cut): allow one tick's movement.
		if s := ownSum("k", all...); s > 1+0.02 {
			t.Fatalf("own shares sum to %v during the partition", s)
		}
		time.Sleep(testInterval / 2) // observing a steady state, not synchronising
	}
	t.Logf("frozen shares %v, sum %.6f", frozen, ownSum("k", all...))
	if age, ok := nodes["eu"].Age("ap"); !ok || age < 5*testInterval {
		t.Fatalf("eu's gossip age of ap is %v (%v), want ≥ %v", age, ok, 5*testInterval)
	}

	// Healed: shares follow the new demand again.
	c.Heal(t, "ap")
	// ap's 10 of 1110 is below its floor: it gets 0.05, eu and us split the rest.
	took = converge(t, "k", map[string]float64{"eu": 0.95 * 900 / 1100, "us": 0.95 * 200 / 1100, "ap": 0.05}, 0.03, 10*time.Second, all...)
	t.Logf("after healing, shares followed in %v", took)
}

// TestRegionAppearsAndLeaves: a configured region that is not running holds
// its floor once the warm-up is over; when it comes up it takes its share
// of demand, and when it leaves cleanly its share goes back at once.
func TestRegionAppearsAndLeaves(t *testing.T) {
	c := testserver.StartNATSCluster(t, "ap", "eu", "us")
	eu := startNode(t, c.URL("eu"), c.Regions(), "eu", "p1", nil)
	us := startNode(t, c.URL("us"), c.Regions(), "us", "p1", nil)
	ready(t, 3, eu, us) // after WarmUp intervals without ap
	f := startFeeder(t)
	f.set(eu, "k", 500)
	f.set(us, "k", 500)
	converge(t, "k", map[string]float64{"eu": 0.475, "us": 0.475, "ap": 0.05}, 0.02, 5*time.Second, eu, us)

	// ap appears with demand: everyone includes it.
	apNC, err := nats.Connect(c.URL("ap"))
	if err != nil {
		t.Fatal(err)
	}
	defer apNC.Close()
	cfg := DefaultConfig()
	cfg.Region, cfg.Process, cfg.Interval, cfg.HalfLife = "ap", "p1", testInterval, testInterval
	cfg.Regions = c.Regions()
	ap, err := New(apNC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ap.Start(); err != nil {
		t.Fatal(err)
	}
	f.set(ap, "k", 1000)
	converge(t, "k", map[string]float64{"eu": 0.25, "us": 0.25, "ap": 0.5}, 0.03, 5*time.Second, eu, us, ap)

	// ap leaves cleanly: its share goes back to eu and us at once.
	f.set(ap, "k", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ap.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	converge(t, "k", map[string]float64{"eu": 0.5, "us": 0.5}, 0.02, 5*time.Second, eu, us)
	for _, n := range []*Node{eu, us} {
		if s := n.Snapshot(); s.Frozen || len(s.Default) != 2 {
			t.Fatalf("%s after ap left: frozen=%v regions=%v", n.cfg.Region, s.Frozen, s.Default)
		}
	}
}

func TestProcessesOfARegionAdd(t *testing.T) {
	nats := testserver.StartNATS(t)
	eu1 := startNode(t, nats.URL, euUS, "eu", "p1", nil)
	eu2 := startNode(t, nats.URL, euUS, "eu", "p2", nil)
	us1 := startNode(t, nats.URL, euUS, "us", "p1", nil)
	ready(t, 2, eu1, eu2, us1)
	f := startFeeder(t)
	f.set(eu1, "k", 300)
	f.set(eu2, "k", 300)
	f.set(us1, "k", 200)
	converge(t, "k", map[string]float64{"eu": 0.75, "us": 0.25}, 0.02, 5*time.Second, eu1, eu2, us1)
	// A region counts its own processes' rises a tick late (ownView), so
	// the own shares sum to at most 1 while demand settles, and to exactly
	// 1, with the processes of a region agreeing, once it has.
	testserver.WaitFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		sum := math.Round(partition.Micro * (eu1.Share("k") + us1.Share("k")))
		if sum > partition.Micro {
			t.Fatalf("own shares sum to %v micro", sum)
		}
		if sum != partition.Micro || eu1.Share("k") != eu2.Share("k") {
			return fmt.Errorf("own shares sum to %v micro; eu1 %v, eu2 %v", sum, eu1.Share("k"), eu2.Share("k"))
		}
		return nil
	})
}

func TestConfigValidation(t *testing.T) {
	srv := testserver.StartNATS(t)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tests := []struct {
		name  string
		mod   func(*Config)
		field string // the error names it
	}{
		{"no region", func(c *Config) { c.Region = "" }, "Region"},
		{"dotted process", func(c *Config) { c.Process = "a.b" }, "Process"},
		{"zero interval", func(c *Config) { c.Interval = 0 }, "Interval"},
		{"floor zero", func(c *Config) { c.Floor = 0 }, "Floor"},
		{"floor too big", func(c *Config) { c.Floor = 0.6 }, "Floor"},
		{"bad weight", func(c *Config) { c.Weights = map[string]float64{"eu": -1, "us": 1} }, "Weights"},
		{"no regions", func(c *Config) { c.Regions = nil }, "Regions"},
		{"own region not in regions", func(c *Config) { c.Regions = []string{"us", "ap"} }, "Regions"},
		{"region repeated", func(c *Config) { c.Regions = []string{"eu", "us", "eu"} }, "Regions"},
		{"dotted region", func(c *Config) { c.Regions = []string{"eu", "us.east"} }, "Regions"},
		{"weights miss a region", func(c *Config) { c.Weights = map[string]float64{"eu": 1} }, "Weights"},
		{"weights name another region", func(c *Config) { c.Weights = map[string]float64{"eu": 1, "us": 1, "ap": 1} }, "Weights"},
		{"zero warm-up", func(c *Config) { c.WarmUp = 0 }, "WarmUp"},
		{"digest too big", func(c *Config) { c.MaxDigestBytes = MaxDigestSize + 1 }, "MaxDigestBytes"},
		{"hysteresis one", func(c *Config) { c.Hysteresis = 1 }, "Hysteresis"},
		{"zero max claim", func(c *Config) { c.MaxClaim = 0 }, "MaxClaim"},
		{"weight band below one", func(c *Config) { c.WeightBand = 0.5 }, "WeightBand"},
		{"infinite max claim", func(c *Config) { c.MaxClaim = math.Inf(1) }, "MaxClaim"},
		{"no processes", func(c *Config) { c.MaxProcesses = 0 }, "MaxProcesses"},
		{"no keys", func(c *Config) { c.MaxKeys = 0 }, "MaxKeys"},
		{"region keys below keys", func(c *Config) { c.MaxRegionKeys = c.MaxKeys - 1 }, "MaxRegionKeys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Region, cfg.Process, cfg.Regions = "eu", "p1", euUS
			if _, err := New(nc, cfg); err != nil {
				t.Fatalf("New refused the good config: %v", err)
			}
			tt.mod(&cfg)
			_, err := New(nc, cfg)
			if err == nil {
				t.Fatal("New accepted a bad config")
			}
			if !strings.Contains(err.Error(), "config "+tt.field+":") {
				t.Fatalf("error %q does not name %s", err, tt.field)
			}
		})
	}
}
