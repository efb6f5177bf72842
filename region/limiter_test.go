package region_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// TestLeaseSteps walks one key through fixed instants and checks each
// decision and the store calls it took.
func TestLeaseSteps(t *testing.T) {
	type step struct {
		advance   time.Duration
		cost      int64
		allowed   bool
		remaining int64
		calls     int // total store calls after the step
		retry     time.Duration
	}
	cases := []struct {
		name  string
		plan  region.Plan
		steps []step
	}{
		{
			name: "leases double while they run out early",
			plan: region.Plan{Rate: 1000, Capacity: 1000},
			steps: []step{
				{cost: 1, allowed: true, remaining: 999, calls: 1},  // lease 1
				{cost: 1, allowed: true, remaining: 998, calls: 2},  // lease 2
				{cost: 1, allowed: true, remaining: 997, calls: 2},  // from the lease
				{cost: 1, allowed: true, remaining: 996, calls: 3},  // lease 4
				{cost: 3, allowed: true, remaining: 993, calls: 3},  // from the lease
				{cost: 1, allowed: true, remaining: 992, calls: 4},  // lease 8
				{cost: 7, allowed: true, remaining: 985, calls: 4},  // from the lease
				{cost: 20, allowed: true, remaining: 965, calls: 5}, // lease 20: cost above size
			},
		},
		{
			name: "an exhausted bucket rejects locally with a retry time",
			plan: region.Plan{Rate: 2, Capacity: 2},
			steps: []step{
				{cost: 1, allowed: true, remaining: 1, calls: 1},
				{cost: 1, allowed: true, remaining: 0, calls: 2},
				// The last sync saw an empty bucket: no store call until it
				// could have refilled.
				{cost: 1, allowed: false, remaining: 0, calls: 2, retry: 500 * time.Millisecond},
				{cost: 1, allowed: false, remaining: 0, calls: 2, retry: 500 * time.Millisecond},
				{advance: 250 * time.Millisecond, cost: 1, allowed: false, remaining: 0, calls: 2, retry: 250 * time.Millisecond},
				{advance: 250 * time.Millisecond, cost: 1, allowed: true, remaining: 0, calls: 3},
			},
		},
		{
			name: "an expired lease goes back before the next one",
			plan: region.Plan{Rate: 100, Capacity: 100},
			steps: []step{
				{cost: 1, allowed: true, remaining: 99, calls: 1},
				{cost: 1, allowed: true, remaining: 98, calls: 2}, // holds 1 more
				{advance: 6 * time.Second, cost: 1, allowed: true, remaining: 99, calls: 3},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.plan, nil)
			calls := 0
			for i, s := range tc.steps {
				f.clock.Advance(s.advance)
				d := f.allow(t, "k", s.cost)
				// A step that made a store call took the slow path.
				if want := map[bool]region.Path{false: region.PathFast, true: region.PathSlow}[s.calls > calls]; d.Path != want {
					t.Fatalf("step %d: path %v, want %v", i, d.Path, want)
				}
				calls = s.calls
				if d.Allowed != s.allowed || d.Remaining != s.remaining {
					t.Fatalf("step %d: allowed %v remaining %d, want %v %d", i, d.Allowed, d.Remaining, s.allowed, s.remaining)
				}
				if got := f.store.Calls(); got != s.calls {
					t.Fatalf("step %d: %d store calls, want %d", i, got, s.calls)
				}
				if d.Allowed && d.RetryAfter != 0 {
					t.Fatalf("step %d: allowed with RetryAfter %v", i, d.RetryAfter)
				}
				if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > s.retry+time.Millisecond || d.RetryAfter < s.retry-time.Millisecond) {
					t.Fatalf("step %d: RetryAfter %v, want %v", i, d.RetryAfter, s.retry)
				}
				if d.Limit != int64(tc.plan.Capacity) || d.Degraded {
					t.Fatalf("step %d: limit %d degraded %v", i, d.Limit, d.Degraded)
				}
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 10, Capacity: 10}, nil)
	cases := []struct {
		name string
		key  string
		cost int64
		want error
		says string
	}{
		{"empty key", "", 1, region.ErrInvalidKey, "empty"},
		{"oversized key", strings.Repeat("k", 513), 1, region.ErrInvalidKey, "513 bytes"},
		{"non-printable key", "acct\x00", 1, region.ErrInvalidKey, "not printable"},
		{"space in key", "acct 1", 1, region.ErrInvalidKey, "not printable"},
		{"zero cost", "k", 0, region.ErrInvalidCost, "positive"},
		{"negative cost", "k", -3, region.ErrInvalidCost, "positive"},
		{"cost above capacity", "k", 11, region.ErrCostExceedsCapacity, "capacity 10"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.lim.Allow(context.Background(), tc.key, tc.cost)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
	// Once the key has state, the fast path checks the cost the same way.
	f.allow(t, "k", 1)
	if _, err := f.lim.Allow(context.Background(), "k", 11); !errors.Is(err, region.ErrCostExceedsCapacity) {
		t.Fatalf("fast path: err = %v", err)
	}
	// Nothing above was counted.
	f.lim.Flush()
	if u := f.usage.totals()["k"]; u.Spent != 1 || u.Rejected != 0 {
		t.Fatalf("usage %+v, want only the one spend", u)
	}
	// A key with no plan is an error, not a rejection.
	lim, err := region.New(memstore.New(nil), region.StaticPlans{}, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Allow(context.Background(), "nobody", 1); !errors.Is(err, region.ErrUnknownPlan) {
		t.Fatalf("unknown plan: err = %v", err)
	}
	// Config errors name the field.
	cfg := region.DefaultConfig()
	cfg.StoreTimeout = 0
	if _, err := region.New(memstore.New(nil), region.StaticPlans{}, cfg); err == nil || !strings.Contains(err.Error(), "StoreTimeout") {
		t.Fatalf("config error = %v, want it to name StoreTimeout", err)
	}
}

func TestEndpointCosts(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 100, Capacity: 100}, func(c *region.Config) {
		c.Costs = region.StaticCosts{"search": 5}
	})
	d, err := f.lim.AllowEndpoint(context.Background(), "k", "search")
	if err != nil || d.Remaining != 95 {
		t.Fatalf("search: %+v %v", d, err)
	}
	d, err = f.lim.AllowEndpoint(context.Background(), "k", "health")
	if err != nil || d.Remaining != 94 {
		t.Fatalf("unweighted endpoint costs the default: %+v %v", d, err)
	}
}

// TestColdBurstLogCalls: a key idle so far, hit by 10,000 requests, makes
// O(log n) store calls (docs/design.md [leasing]), not 10,000.
func TestColdBurstLogCalls(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 100_000, Capacity: 100_000}, nil)
	const n = 10_000
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/8; i++ {
				if d, err := f.lim.Allow(context.Background(), "cold", 1); err != nil || !d.Allowed {
					t.Errorf("decision %d: %+v %v", i, d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	calls := f.store.Calls()
	t.Logf("%d decisions took %d store calls", n, calls)
	// log2(10,000) ≈ 13.3; the leases double up to the cap of 60,000.
	if calls > 16 {
		t.Fatalf("%d store calls for a burst of %d, want O(log n) ≤ 16", calls, n)
	}
}

// TestLeaseCapFromBudget: one process's lease never exceeds budget × rate ×
// horizon × share / processes.
func TestLeaseCapFromBudget(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 100, Capacity: 10_000}, func(c *region.Config) {
		c.ProcessEstimate = 4
		c.Shares = fixedShare(0.5)
	})
	for i := 0; i < 2000; i++ {
		f.allow(t, "k", 1)
	}
	// cap = 0.01 × 100/s × 60 s × 0.5 / 4 = 7
	for _, w := range f.store.asked {
		if w > 7 {
			t.Fatalf("asked for a lease of %d, cap is 7 (asked %v)", w, f.store.asked)
		}
	}
}

// TestDecisionPlan: every decision names the plan it was taken against, on
// every path, and a catalogue change is seen at the key's next miss.
func TestDecisionPlan(t *testing.T) {
	gold := region.Plan{Name: "gold", Rate: 100, Capacity: 100}
	plans := &settablePlans{p: gold}
	ctx := context.Background()
	lim, err := region.New(memstore.New(nil), plans, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []region.Path{region.PathSlow, region.PathSlow, region.PathFast} {
		d, err := lim.Allow(ctx, "k", 1)
		if err != nil || d.Path != want || d.Plan() != gold {
			t.Fatalf("decision %d: path %v plan %+v err %v, want path %v plan %+v", i, d.Path, d.Plan(), err, want, gold)
		}
	}
	silver := region.Plan{Name: "silver", Rate: 100, Capacity: 100}
	plans.set(silver)
	lim.InvalidateAll()
	if d, err := lim.Allow(ctx, "k", 1); err != nil || d.Plan() != silver {
		t.Fatalf("after the change: plan %+v err %v, want %+v", d.Plan(), err, silver)
	}
	down, err := region.New(downStore{}, plans, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if d, err := down.Allow(ctx, "k", 1); err != nil || d.Path != region.PathDegraded || d.Plan() != silver {
		t.Fatalf("store down: path %v plan %+v err %v, want degraded on %+v", d.Path, d.Plan(), err, silver)
	}
	if (region.Decision{}).Plan() != (region.Plan{}) {
		t.Fatal("a zero Decision names a plan")
	}
}
