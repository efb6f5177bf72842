package region_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// countingStore counts calls to the store it wraps.
type countingStore struct {
	store.Store
	mu    sync.Mutex
	calls int
	asked []int64
}

func (c *countingStore) Lease(ctx context.Context, req store.LeaseRequest) (store.LeaseReply, error) {
	c.mu.Lock()
	c.calls++
	c.asked = append(c.asked, req.Want)
	c.mu.Unlock()
	return c.Store.Lease(ctx, req)
}

// Request counts and forwards a request call (store.RequestStore).
func (c *countingStore) Request(ctx context.Context, req store.RequestCall) (store.RequestReply, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	rs, ok := c.Store.(store.RequestStore)
	if !ok {
		return store.RequestReply{}, fmt.Errorf("%T records no request ids", c.Store)
	}
	return rs.Request(ctx, req)
}

// LeaseQuota counts and forwards a quota call (store.QuotaStore).
func (c *countingStore) LeaseQuota(ctx context.Context, call store.QuotaCall) (store.QuotaReply, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	qs, ok := c.Store.(store.QuotaStore)
	if !ok {
		return store.QuotaReply{}, fmt.Errorf("%T keeps no quota counters", c.Store)
	}
	return qs.LeaseQuota(ctx, call)
}

func (c *countingStore) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// usageLog is a UsageSink that keeps every delta.
type usageLog struct {
	mu sync.Mutex
	us []region.Usage
}

func (u *usageLog) Record(batch []region.Usage) {
	u.mu.Lock()
	u.us = append(u.us, batch...)
	u.mu.Unlock()
}

// totals sums the deltas per key.
func (u *usageLog) totals() map[string]region.Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := map[string]region.Usage{}
	for _, x := range u.us {
		t := m[x.Key]
		t.Key = x.Key
		t.Spent += x.Spent
		t.Leased += x.Leased
		t.Rejected += x.Rejected
		t.Degraded += x.Degraded
		t.WouldReject += x.WouldReject
		t.Refunded += x.Refunded
		t.Charged += x.Charged
		m[x.Key] = t
	}
	return m
}

type fixture struct {
	clock *clock.Manual
	store *countingStore
	lim   *region.Limiter
	usage *usageLog
}

func newFixture(t *testing.T, plan region.Plan, mod func(*region.Config)) *fixture {
	t.Helper()
	clock := newManualClock()
	st := &countingStore{Store: memstore.New(clock)}
	usage := &usageLog{}
	cfg := region.DefaultConfig()
	cfg.Clock = clock
	cfg.Usage = usage
	if mod != nil {
		mod(&cfg)
	}
	lim, err := region.New(st, region.StaticPlans{Default: plan}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{clock: clock, store: st, lim: lim, usage: usage}
}

func (f *fixture) allow(t *testing.T, key string, cost int64) region.Decision {
	t.Helper()
	d, err := f.lim.Allow(context.Background(), key, cost)
	if err != nil {
		t.Fatalf("Allow(%q, %d): %v", key, cost, err)
	}
	return d
}

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
		{"oversized key", strings.Repeat("k", 257), 1, region.ErrInvalidKey, "257 bytes"},
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

type fixedShare float64

func (s fixedShare) Share(string) float64 { return float64(s) }

// TestIdleLeasesGoBack: Run gives an idle process's permits back to the
// store within LeaseTTL + SweepInterval, so other processes can use them,
// and its flush accounts for them; measured as outstanding permits and
// usage. (TestSweep, inside the package, checks each sweep's returns.)
func TestIdleLeasesGoBack(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 1000, Capacity: 1000}, nil)
	for k := 0; k < 50; k++ {
		key := "idle-" + string(rune('a'+k%26)) + string(rune('a'+k/26))
		for i := 0; i < 40; i++ {
			f.allow(t, key, 1)
		}
	}
	held := f.lim.Stats().OutstandingPermits
	if held == 0 {
		t.Fatal("no permits outstanding after a burst: the test proves nothing")
	}
	runOn(t, f.lim, f.clock)
	cfg := region.DefaultConfig()
	for d := time.Duration(0); d < cfg.LeaseTTL+cfg.SweepInterval; d += cfg.SweepInterval {
		f.clock.Advance(cfg.SweepInterval)
	}
	testserver.WaitFor(t, 5*time.Second, time.Millisecond, func() error {
		if n := f.lim.Stats().OutstandingPermits; n != 0 {
			return fmt.Errorf("%d of %d permits still outstanding", n, held)
		}
		return nil
	})
	// The store has them again, and the usage Run flushes says so.
	f.clock.Advance(cfg.FlushInterval)
	testserver.WaitFor(t, 5*time.Second, time.Millisecond, func() error {
		tot := f.usage.totals()
		if len(tot) != 50 {
			return fmt.Errorf("usage of %d keys flushed, want 50", len(tot))
		}
		for key, u := range tot {
			if u.Leased != u.Spent {
				return fmt.Errorf("%s: leased %d, spent %d: returned permits not accounted", key, u.Leased, u.Spent)
			}
		}
		return nil
	})
}

// TestEvictionKeepsUsage: keys evicted under the MaxKeys cap hand over their
// usage and permits first; totals stay exact.
func TestEvictionKeepsUsage(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 1000, Capacity: 1000}, func(c *region.Config) {
		c.MaxKeys = 640
		// The store's latency is not what this test is about: a call past
		// the 5 ms default on a loaded machine would be decided degraded,
		// spent without a lease, and leased would not equal spent.
		c.StoreTimeout = time.Minute
	})
	const keys, rounds = 3000, 3
	for r := 0; r < rounds; r++ {
		for k := 0; k < keys; k++ {
			f.allow(t, keyName(k), 2)
		}
	}
	if n := f.lim.Stats().TrackedKeys; n > 704 {
		t.Fatalf("%d keys tracked, cap 640 (+10%%)", n)
	}
	f.lim.Drain(context.Background())
	tot := f.usage.totals()
	if len(tot) != keys {
		t.Fatalf("usage for %d keys, want %d", len(tot), keys)
	}
	for k, u := range tot {
		if u.Spent != 2*rounds || u.Degraded != 0 {
			t.Fatalf("%s spent %d (%d degraded), want %d, none degraded", k, u.Spent, u.Degraded, 2*rounds)
		}
		if u.Leased != u.Spent {
			t.Fatalf("%s leased %d after drain, spent %d", k, u.Leased, u.Spent)
		}
	}
	if s := f.lim.Stats(); s.OutstandingPermits != 0 {
		t.Fatalf("%d permits outstanding after drain", s.OutstandingPermits)
	}
}

func keyName(i int) string {
	const digits = "0123456789"
	b := []byte("key-")
	if i == 0 {
		return "key-0"
	}
	var rev []byte
	for ; i > 0; i /= 10 {
		rev = append(rev, digits[i%10])
	}
	for j := len(rev) - 1; j >= 0; j-- {
		b = append(b, rev[j])
	}
	return string(b)
}

// TestAccountingWindows: usage lands in the key's jittered window, and a
// window roll hands the old window's deltas over separately.
func TestAccountingWindows(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 1000, Capacity: 1000}, nil)
	w := region.DefaultConfig().Window
	start := f.clock.Now()
	first := region.WindowStart("k", start, w)
	f.allow(t, "k", 5)
	next := first.Add(w)
	f.clock.Advance(next.Sub(start) + time.Millisecond)
	f.allow(t, "k", 7)
	f.lim.Flush()
	byWindow := map[time.Time]int64{}
	for _, u := range f.usage.us {
		byWindow[u.WindowStart] += u.Spent
	}
	if byWindow[first] != 5 || byWindow[next] != 7 {
		t.Fatalf("spent by window %v, want 5 in %v and 7 in %v", byWindow, first, next)
	}
	if !region.WindowStart("acct_1", start, w).Equal(region.WindowStart("acct_1", start.Add(time.Millisecond), w)) {
		t.Fatal("window start moved within a window")
	}
}

// TestInvalidateReleases: a share change invalidates the lease and the next
// decision leases at the new share.
func TestInvalidateReleases(t *testing.T) {
	share := &settableShare{v: 1}
	f := newFixture(t, region.Plan{Rate: 1000, Capacity: 1000}, func(c *region.Config) { c.Shares = share })
	for i := 0; i < 10; i++ {
		f.allow(t, "k", 1)
	}
	share.set(0.5)
	f.lim.Invalidate("k")
	d := f.allow(t, "k", 1)
	if d.Remaining > 500 {
		t.Fatalf("remaining %d after the share halved, want ≤ 500", d.Remaining)
	}
	f.lim.InvalidateAll()
	before := f.store.Calls()
	f.allow(t, "k", 1)
	if f.store.Calls() != before+1 {
		t.Fatal("InvalidateAll did not send the key back to the store")
	}
}

// TestReshare: a share change ends the lease of a key that is using its
// region's bucket, and not of a key far below its limit.
func TestReshare(t *testing.T) {
	cases := []struct {
		name      string
		spend     int64 // spent before the share changes, of a capacity of 100
		wantCalls int   // store calls the next decision makes
	}{
		{"a key far below its limit keeps its lease", 10, 0},
		{"a key using its bucket takes the new share now", 70, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			share := &settableShare{v: 1}
			f := newFixture(t, region.Plan{Rate: 1, Capacity: 100}, func(c *region.Config) {
				c.Shares = share
				c.AccuracyBudget = 0.5 // leases of up to 30: the last one outlives the spending
			})
			for range tc.spend {
				f.allow(t, "k", 1)
			}
			ks, _ := f.lim.Peek("k")
			if ks.Lease == 0 {
				t.Fatalf("no lease left after spending %d: %+v", tc.spend, ks)
			}
			share.set(0.5)
			f.lim.Reshare("k")
			before := f.store.Calls()
			f.allow(t, "k", 1)
			if got := f.store.Calls() - before; got != tc.wantCalls {
				t.Fatalf("the next decision made %d store calls, want %d", got, tc.wantCalls)
			}
		})
	}
}

type settableShare struct {
	mu sync.Mutex
	v  float64
}

func (s *settableShare) Share(string) float64 { s.mu.Lock(); defer s.mu.Unlock(); return s.v }
func (s *settableShare) set(v float64)        { s.mu.Lock(); s.v = v; s.mu.Unlock() }

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

type settablePlans struct {
	mu sync.Mutex
	p  region.Plan
}

func (s *settablePlans) Plan(string) (region.Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p, nil
}

func (s *settablePlans) set(p region.Plan) { s.mu.Lock(); s.p = p; s.mu.Unlock() }

// downStore is a store that is never reachable.
type downStore struct{}

func (downStore) Lease(context.Context, store.LeaseRequest) (store.LeaseReply, error) {
	return store.LeaseReply{}, store.ErrStoreUnavailable
}
