package region_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
)

// TestStoreOutageDegradesAndRecovers cuts the link to Redis with a real TCP
// proxy: decisions keep coming within the timeout, flagged degraded, under
// the traffic-weighted bound, and normal mode returns with Redis.
func TestStoreOutageDegradesAndRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr)
	prefix := fmt.Sprintf("outage%d:", time.Now().UnixNano())
	plan := region.Plan{Rate: 200, Capacity: 200}
	mod := func(c *region.Config) {
		c.ProcessEstimate = 2
		c.StoreTimeout = 20 * time.Millisecond // generous for a loaded CI machine; the bound is the point
		c.BreakerCooldown = 50 * time.Millisecond
	}
	// Two processes; a carries 3/4 of the key's traffic, b 1/4.
	a, ua := newRedisLimiter(t, redisClient(t, proxy.Addr()), prefix, plan, mod)
	b, ub := newRedisLimiter(t, redisClient(t, proxy.Addr()), prefix, plan, mod)
	ctx := context.Background()
	drive := func(n int, until time.Time) (admitted map[*region.Limiter]int64, degraded int, slowest time.Duration) {
		admitted = map[*region.Limiter]int64{}
		for i := 0; i < n || time.Now().Before(until); i++ {
			lim := a
			if i%4 == 3 {
				lim = b
			}
			t0 := time.Now()
			d, err := lim.Allow(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			slowest = max(slowest, time.Since(t0))
			if d.Allowed {
				admitted[lim]++
			}
			if d.Degraded {
				degraded++
			}
			if d.Degraded != (d.Path == region.PathDegraded) {
				t.Fatalf("decision degraded %v on path %v", d.Degraded, d.Path)
			}
		}
		return
	}
	// Healthy: learn the local shares from the store's demand counter.
	for i := 0; i < 20; i++ {
		drive(40, time.Time{})
		<-time.After(20 * time.Millisecond) // let the bucket refill so that leases keep flowing
	}
	sa, _ := a.Peek("k")
	sb, _ := b.Peek("k")
	t.Logf("learned local shares: a %.2f b %.2f", sa.LocalShare, sb.LocalShare)
	if sa.LocalShare <= sb.LocalShare || sa.LocalShare+sb.LocalShare < 0.8 || sa.LocalShare+sb.LocalShare > 1.2 {
		t.Fatalf("local shares a %.2f b %.2f: want a, with 3/4 of the traffic, above b and a sum near 1", sa.LocalShare, sb.LocalShare)
	}

	proxy.Down()
	start := time.Now()
	got, degraded, slowest := drive(0, start.Add(300*time.Millisecond))
	elapsed := time.Since(start)
	t.Logf("outage: admitted a %d b %d, %d degraded, slowest decision %v, in %v", got[a], got[b], degraded, slowest, elapsed)
	if degraded == 0 {
		t.Fatal("no decision was flagged degraded during the outage")
	}
	if slowest > 20*time.Millisecond+50*time.Millisecond {
		t.Fatalf("slowest decision took %v, want about the 20ms store timeout", slowest)
	}
	// Each process starts from its local share of what the region had left
	// (at most capacity) and refills at max(local share, floor) × rate: it
	// may admit max(local share, floor) × (capacity + rate·t), plus the
	// lease it held when Redis went.
	floor := max(region.DefaultConfig().MinLocalShare, region.DefaultConfig().FloorFraction/2)
	boundOf := func(share float64) float64 {
		return max(share, floor)*(plan.Capacity+plan.Rate*elapsed.Seconds()) + 2 // rounding
	}
	leaseSlack := region.DefaultConfig().AccuracyBudget * plan.Rate * 60 / 2
	if float64(got[a]) > boundOf(sa.LocalShare)+leaseSlack {
		t.Fatalf("a admitted %d during the outage, bound %.0f", got[a], boundOf(sa.LocalShare)+leaseSlack)
	}
	if float64(got[b]) > boundOf(sb.LocalShare)+leaseSlack {
		t.Fatalf("b admitted %d during the outage, bound %.0f", got[b], boundOf(sb.LocalShare)+leaseSlack)
	}
	if s := a.Stats(); s.Breaker != region.BreakerOpen && s.Breaker != region.BreakerHalfOpen {
		t.Fatalf("breaker %v during the outage", s.Breaker)
	}

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		d, err := a.Allow(ctx, "k", 1)
		if err != nil {
			return err
		}
		if d.Degraded {
			return fmt.Errorf("still degraded")
		}
		return nil
	})
	if s := a.Stats(); s.Breaker != region.BreakerClosed {
		t.Fatalf("breaker %v after recovery", s.Breaker)
	}
	// Degraded decisions are flagged in usage too (what they allowed is
	// charged to the bucket: TestDegradedSpendIsChargedOnce).
	a.Drain(ctx)
	b.Drain(ctx)
	var deg int64
	for _, u := range append(ua.us, ub.us...) {
		deg += u.Degraded
	}
	if deg == 0 {
		t.Fatal("usage carries no degraded cost")
	}
}

// failedWrites is an Observer that adds up the permits asked for by store
// calls that failed: such a call may still have run on the store.
type failedWrites struct {
	mu   sync.Mutex
	want int64
}

func (f *failedWrites) StoreCall(_ time.Duration, want, _ int64, err error) {
	if err != nil {
		f.mu.Lock()
		f.want += want
		f.mu.Unlock()
	}
}
func (f *failedWrites) BreakerState(region.BreakerState) {}

// TestDegradedSpendIsChargedOnce: what a process allows in degraded mode is
// charged to the regional bucket once the store is back, exactly once, also
// when the store was slow rather than cut (a timed-out call may still run on
// the store, so calls that carry debt wait for a call that succeeded).
func TestDegradedSpendIsChargedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr)
	for i, tc := range []struct {
		name  string
		fault func() error
	}{
		{"store cut", func() error { proxy.Down(); return nil }},
		// Replies slower than the timeout: every call runs on the store
		// although the caller sees it fail.
		{"store answers after the timeout", func() error { return proxy.ReplyLatency(300 * time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("once%d-%d:", time.Now().UnixNano(), i)
			clk := clock.NewManual(time.Now())
			lost := &failedWrites{}
			const cooldown = 50 * time.Millisecond
			// A refill of 1 per 1000 s: the bucket moves by what is leased
			// and charged only.
			// Connections that have made their handshake: on a new one a call
			// would fail in the handshake, before its command reached the
			// store.
			rdb := redisClient(t, proxy.Addr())
			var warm []*redis.Conn
			for range 16 {
				c := rdb.Conn()
				if err := c.Ping(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				warm = append(warm, c)
			}
			for _, c := range warm {
				c.Close() // back to the pool
			}
			lim, _ := newRedisLimiter(t, rdb, prefix, region.Plan{Rate: 0.001, Capacity: 100}, func(c *region.Config) {
				c.ProcessEstimate = 1
				// Long enough that a loaded machine does not time out the
				// first call, which would make it degraded before the fault.
				c.StoreTimeout = 100 * time.Millisecond
				c.BreakerCooldown = cooldown
				c.DebtGrace = time.Millisecond // the bucket is new: no grace, so that the debt is charged
				c.Clock = clk
				c.SweepInterval = cooldown // every step of the clock below is a sweep of Run's
				c.Observer = lost
			})
			ctx := context.Background()
			tokens := func() float64 {
				t.Helper()
				v, err := srv.Do("HGET", prefix+"{k}", "t")
				if err != nil {
					t.Fatal(err)
				}
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("bucket tokens %q: %v", v, err)
				}
				return f
			}
			var normal, degraded int64
			allow := func() region.Decision {
				t.Helper()
				d, err := lim.Allow(ctx, "k", 5)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case d.Allowed && d.Degraded:
					degraded += 5
				case d.Allowed:
					normal += 5
				}
				return d
			}
			// The script is loaded and the bucket made by a normal decision:
			// a degraded first one's debt would be forgiven (a fresh bucket)
			// while counted below.
			if d := allow(); d.Degraded || !d.Allowed {
				t.Fatalf("first decision, before any fault: %+v, want allowed and not degraded", d)
			}
			lim.Drain(ctx)
			before, spentBefore := tokens(), normal
			normal = 0

			// From here on Run sweeps at every step of the clock, beside the
			// decisions, as in a daemon.
			stop := runOn(t, lim, clk)
			if err := tc.fault(); err != nil {
				t.Fatal(err)
			}
			for range 6 {
				if d := allow(); !d.Degraded || !d.Allowed {
					t.Fatalf("decision during the fault: %+v, want allowed and degraded", d)
				}
				// Run's sweep must not charge the debt to a store that does
				// not answer in time.
				clk.Advance(cooldown)
			}
			if err := proxy.Restore(); err != nil {
				t.Fatal(err)
			}
			testserver.WaitFor(t, 5*time.Second, 10*time.Millisecond, func() error {
				clk.Advance(cooldown)
				if d := allow(); d.Degraded {
					return fmt.Errorf("still degraded")
				}
				return nil
			})
			stop() // Run's last sweep is done, and it drained the limiter
			after := tokens()
			lost.mu.Lock()
			mayHaveRun := lost.want
			lost.mu.Unlock()
			t.Logf("bucket %.2f before (after spending %d), %.2f after; %d allowed degraded, %d normally, %d asked by calls that timed out",
				before, spentBefore, after, degraded, normal, mayHaveRun)
			charged := before - after - float64(normal)
			if charged < float64(degraded)-0.1 {
				t.Fatalf("the bucket was charged %.2f for %d allowed degraded: degraded spend not paid back", charged, degraded)
			}
			if charged > float64(degraded+mayHaveRun)+0.1 {
				t.Fatalf("the bucket was charged %.2f for %d allowed degraded (and at most %d lost to timed-out calls): charged twice", charged, degraded, mayHaveRun)
			}
		})
	}
}

// TestSlowStoreCountsAsDown: Redis slowed past the timeout degrades like an
// outage, and each decision still returns within about the timeout.
func TestSlowStoreCountsAsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr)
	lim, _ := newRedisLimiter(t, redisClient(t, proxy.Addr()), fmt.Sprintf("slow%d:", time.Now().UnixNano()),
		region.Plan{Rate: 1000, Capacity: 1000}, func(c *region.Config) { c.StoreTimeout = 5 * time.Millisecond })
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "warm", 1); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Latency(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var degraded int
	var slowest time.Duration
	for i := 0; i < 50; i++ {
		t0 := time.Now()
		d, err := lim.Allow(ctx, fmt.Sprintf("slow-%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(t0))
		if d.Degraded {
			degraded++
		}
	}
	t.Logf("%d of 50 degraded, slowest %v", degraded, slowest)
	if degraded != 50 {
		t.Fatalf("%d of 50 decisions degraded with a store slower than its timeout", degraded)
	}
	if slowest > 40*time.Millisecond {
		t.Fatalf("slowest decision %v with a 5ms store timeout", slowest)
	}
	if lim.Stats().Breaker == region.BreakerClosed {
		t.Fatal("breaker closed while every call timed out")
	}
}

// TestClockSkewDoesNotChangeAdmission: processes whose clocks are off by
// ±500 ms admit exactly what an unskewed one does, because the bucket runs
// on Redis' clock; and they agree on accounting windows.
func TestClockSkewDoesNotChangeAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	rdb := redisClient(t, srv.Addr)
	plan := region.Plan{Rate: 0.5, Capacity: 40}
	admittedWith := func(skews ...time.Duration) (int, []region.Usage) {
		prefix := fmt.Sprintf("skew%d:", time.Now().UnixNano())
		var lims []*region.Limiter
		var logs []*usageLog
		for _, s := range skews {
			lim, u := newRedisLimiter(t, rdb, prefix, plan, func(c *region.Config) {
				c.ClockOffset = s
				c.ProcessEstimate = len(skews)
				c.StoreTimeout = time.Second
			})
			lims = append(lims, lim)
			logs = append(logs, u)
		}
		n := 0
		for i := 0; i < 200; i++ {
			d, err := lims[i%len(lims)].Allow(context.Background(), "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				n++
			}
		}
		var us []region.Usage
		for i, l := range lims {
			l.Drain(context.Background())
			us = append(us, logs[i].us...)
		}
		return n, us
	}
	base, _ := admittedWith(0)
	skewed, usage := admittedWith(500*time.Millisecond, -500*time.Millisecond, 0)
	t.Logf("admitted unskewed %d, skewed ±500ms %d", base, skewed)
	if base < 40 || base > 41 || skewed < 40 || skewed > 41 {
		t.Fatalf("admitted %d unskewed and %d skewed, want capacity 40 (+1 refill) for both", base, skewed)
	}
	windows := map[time.Time]bool{}
	for _, u := range usage {
		if u.Spent > 0 {
			windows[u.WindowStart] = true
		}
	}
	if len(windows) > 2 { // 2 only if the run straddled a window boundary
		t.Fatalf("skewed processes reported %d different windows: %v", len(windows), windows)
	}
}
