package region_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/redisstore"
	"github.com/quotaplatform/quota/region/store"
)

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

func newRedisLimiter(t *testing.T, rdb *redis.Client, prefix string, plan region.Plan, mod func(*region.Config)) (*region.Limiter, *usageLog) {
	t.Helper()
	usage := &usageLog{}
	cfg := region.DefaultConfig()
	cfg.Usage = usage
	if mod != nil {
		mod(&cfg)
	}
	lim, err := region.New(redisstore.New(rdb, prefix), region.StaticPlans{Default: plan}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lim, usage
}

// TestConcurrentLimitersHoldBound: many goroutines in several limiters
// sharing one Redis key never admit more than capacity + rate·t.
func TestConcurrentLimitersHoldBound(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	rdb := redisClient(t, srv.Addr)
	plan := region.Plan{Rate: 2000, Capacity: 500}
	const limiters, goroutines = 4, 8
	prefix := fmt.Sprintf("bound%d:", time.Now().UnixNano())
	var lims []*region.Limiter
	for i := 0; i < limiters; i++ {
		lim, _ := newRedisLimiter(t, rdb, prefix, plan, func(c *region.Config) {
			c.ProcessEstimate = limiters
			c.StoreTimeout = time.Second // this test is about the bound, not timeouts
		})
		lims = append(lims, lim)
	}
	var admitted, decisions atomic.Int64
	start := time.Now()
	deadline := start.Add(time.Second)
	var wg sync.WaitGroup
	for i := 0; i < limiters*goroutines; i++ {
		wg.Add(1)
		go func(lim *region.Limiter) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				d, err := lim.Allow(context.Background(), "shared", 1)
				if err != nil {
					t.Error(err)
					return
				}
				decisions.Add(1)
				if d.Allowed {
					admitted.Add(1)
				}
				if d.Degraded {
					t.Error("degraded decision with a healthy store")
					return
				}
			}
		}(lims[i%limiters])
	}
	wg.Wait()
	elapsed := time.Since(start)
	var outstanding, calls int64
	for _, l := range lims {
		s := l.Stats()
		outstanding += s.OutstandingPermits
		calls += s.StoreCalls
	}
	bound := plan.Capacity + plan.Rate*elapsed.Seconds()
	t.Logf("admitted %d of %d decisions in %v (bound %.0f, outstanding %d, %.4f store calls/decision)",
		admitted.Load(), decisions.Load(), elapsed, bound, outstanding, float64(calls)/float64(decisions.Load()))
	if float64(admitted.Load()) > bound {
		t.Fatalf("admitted %d > capacity + rate·t = %.0f", admitted.Load(), bound)
	}
	if decisions.Load() > admitted.Load()*2 && float64(admitted.Load()+outstanding) < 0.8*bound {
		t.Fatalf("admitted %d + outstanding %d, far under the bound %.0f while demand exceeded it", admitted.Load(), outstanding, bound)
	}
}

func redisClientB(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	return c
}

// TestKeyErrorStaysWithItsKey: a key whose Redis bucket holds another type
// (HGET fails with WRONGTYPE) is decided in degraded mode on its own, more
// times than BreakerThreshold, while every other key stays on the fast
// path: the error says nothing of the store's availability, so the breaker
// never counts it.
func TestKeyErrorStaysWithItsKey(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	rdb := redisClient(t, srv.Addr)
	prefix := fmt.Sprintf("keyerr%d:", time.Now().UnixNano())
	clk := newManualClock()
	const cooldown = 100 * time.Millisecond
	lim, usage := newRedisLimiter(t, rdb, prefix, region.Plan{Rate: 100, Capacity: 100}, func(c *region.Config) {
		c.Clock = clk // calls take no time on it: no call is too slow
		c.BreakerCooldown = cooldown
		// The context deadline runs on the real clock: a call that took
		// 5 ms on a loaded machine timed out, counted as the store's
		// failure instead of the key's, and was tried again.
		c.StoreTimeout = time.Second
	})
	ctx := context.Background()
	st := redisstore.New(rdb, prefix)
	if err := rdb.Set(ctx, st.BucketKey("broken"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := st.Lease(ctx, store.LeaseRequest{Key: "broken", Rate: 1, Capacity: 1, Want: 1, Min: 1, Spread: 1})
	if !errors.Is(err, store.ErrStoreRejected) || errors.Is(err, store.ErrStoreUnavailable) {
		t.Fatalf("Lease on a key of another type: err = %v, want ErrStoreRejected only", err)
	}

	allow := func(key string) region.Decision {
		t.Helper()
		d, err := lim.Allow(ctx, key, 1)
		if err != nil {
			t.Fatalf("Allow(%q): %v", key, err)
		}
		return d
	}
	threshold := region.DefaultConfig().BreakerThreshold
	for i := range threshold + 2 {
		// Each decision after the cooldown makes a store call, which fails.
		if d := allow("broken"); !d.Allowed || !d.Degraded || d.Path != region.PathDegraded {
			t.Fatalf("broken key, decision %d: %+v, want allowed from its degraded bucket", i, d)
		}
		// Within the cooldown it is decided without a store call.
		calls := lim.Stats().StoreCalls
		if d := allow("broken"); !d.Degraded {
			t.Fatalf("broken key within the cooldown: %+v, want degraded", d)
		}
		if n := lim.Stats().StoreCalls; n != calls {
			t.Fatalf("broken key within the cooldown made %d store calls", n-calls)
		}
		clk.Advance(cooldown)
	}
	// Leases start at one permit and double (docs/design.md [leasing]).
	for i, want := range []region.Path{region.PathSlow, region.PathSlow, region.PathFast, region.PathSlow, region.PathFast} {
		if d := allow("healthy"); !d.Allowed || d.Degraded || d.Path != want {
			t.Fatalf("healthy key, decision %d: %+v, want allowed on the %v path", i, d, want)
		}
	}
	s := lim.Stats()
	t.Logf("stats: %+v", s)
	if s.Breaker != region.BreakerClosed || s.BreakerFailures != 0 {
		t.Fatalf("breaker %v with %d failures counted, want closed with none", s.Breaker, s.BreakerFailures)
	}
	if s.KeyErrors != int64(threshold+2) {
		t.Fatalf("KeyErrors = %d, want %d (one per cooldown)", s.KeyErrors, threshold+2)
	}
	// Drain gives the broken key's debt back: refused and dropped, and the
	// breaker still counts nothing.
	lim.Drain(ctx)
	if s := lim.Stats(); s.Breaker != region.BreakerClosed || s.BreakerFailures != 0 || s.KeyErrors != int64(threshold+3) {
		t.Fatalf("after Drain: breaker %v with %d failures and %d key errors, want closed, 0 and %d",
			s.Breaker, s.BreakerFailures, s.KeyErrors, threshold+3)
	}
	if v, err := rdb.Get(ctx, st.BucketKey("broken")).Result(); err != nil || v != "not a hash" {
		t.Fatalf("broken key now %q (%v): the refused calls wrote", v, err)
	}
	u := usage.totals()
	if b := u["broken"]; b.Spent != int64(2*(threshold+2)) || b.Degraded != b.Spent {
		t.Fatalf("broken key's usage %+v: want all %d spent flagged degraded", b, 2*(threshold+2))
	}
	if h := u["healthy"]; h.Spent != 5 || h.Degraded != 0 {
		t.Fatalf("healthy key's usage %+v", h)
	}
}

// TestRecoveryAfterRedisRestart: Redis, 10 ms of round trip away behind a
// proxy, is killed, and restarted empty. A fresh
// connection costs several round trips (dial, HELLO, CLIENT SETNAME, the
// script's NOSCRIPT and EVAL), more than the 25 ms store timeout, so a probe
// within the store timeout would lose its connection every time. A limiter
// that makes no decision at all closes its breaker by itself (Run probes in
// the background, with ProbeTimeout for the reconnection and the script
// reload, then a call within the store timeout), and the next decision is
// on the regional bucket again.
func TestRecoveryAfterRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr)
	if err := proxy.Latency(5 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, ClientName: "recovery-test"})
	t.Cleanup(func() { rdb.Close() })
	lim, _ := newRedisLimiter(t, rdb, "recovery:", region.Plan{Rate: 100, Capacity: 100}, func(c *region.Config) {
		c.StoreTimeout = 25 * time.Millisecond
		c.BreakerCooldown = 50 * time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lim.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if err := rdb.Ping(ctx).Err(); err != nil { // a connection, before the first decision
		t.Fatal(err)
	}
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if d, err := lim.Allow(ctx, "k", 1); err != nil || d.Degraded {
			return fmt.Errorf("not a healthy decision yet: %+v %v", d, err)
		}
		return nil
	})
	srv.Stop()
	// Decisions go on, degraded, while probes fail: the proxy accepts each
	// connection and closes it, as a load balancer in front of a dead
	// Redis would.
	calls := lim.Stats().StoreCalls
	testserver.WaitFor(t, 20*time.Second, 5*time.Millisecond, func() error {
		d, err := lim.Allow(ctx, "k", 1)
		if err != nil {
			return err
		}
		failed := lim.Stats().StoreCalls - calls
		if !d.Degraded || failed < 20 {
			return fmt.Errorf("degraded %v, %d failed store calls", d.Degraded, failed)
		}
		return nil
	})
	srv.Restart(t)
	restarted := time.Now()
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if s := lim.Stats().Breaker; s != region.BreakerClosed {
			return fmt.Errorf("breaker %v", s)
		}
		return nil
	})
	took := time.Since(restarted)
	t.Logf("breaker closed %v after the restart, with no decision to trigger it", took)
	// A decision after recovery is normal again. One store call may still
	// exceed the 25 ms timeout on a loaded machine (that decision degrades
	// and counts as a failure), so a few tries are allowed.
	testserver.WaitFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if d, err := lim.Allow(ctx, "k", 1); err != nil || d.Degraded {
			return fmt.Errorf("decision after recovery: %+v %v", d, err)
		}
		return nil
	})
	// go-redis dials again at most a second after the server is back; a
	// probe follows within the cooldown.
	if took > 2*time.Second {
		t.Errorf("recovery took %v, want within 2 s", took)
	}
}
