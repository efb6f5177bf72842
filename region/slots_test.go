package region_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/store"
)

// TestConcurrencySlots: two limiters on one real Redis, a plan of 3
// slots: of 4 concurrent acquires 3 succeed; a release frees one; a
// holder that dies frees its slot within the TTL; and under a storm of
// acquires and releases no slot is ever granted twice.
func TestConcurrencySlots(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	prefix := fmt.Sprintf("slots%d:", time.Now().UnixNano())
	plan := region.Plan{Name: "llm", Rate: 1, Capacity: 1, Concurrency: 3}
	const ttl = 300 * time.Millisecond
	mod := func(c *region.Config) {
		c.SlotTTL = ttl
		c.StoreTimeout = time.Second // this test is about counts, not timeouts
	}
	a, _ := newRedisLimiter(t, redisClient(t, srv.Addr), prefix, plan, mod)
	b, _ := newRedisLimiter(t, redisClient(t, srv.Addr), prefix, plan, mod)
	ctx := context.Background()

	var got []region.Slot
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		lim := []*region.Limiter{a, b}[i%2]
		wg.Go(func() {
			s, err := lim.Acquire(ctx, "k", "")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
		})
	}
	wg.Wait()
	var held []region.Slot
	for _, s := range got {
		if s.Allowed {
			held = append(held, s)
		} else if s.RetryAfter <= 0 || s.Degraded {
			t.Fatalf("refusal %+v", s)
		}
	}
	if len(held) != 3 {
		t.Fatalf("%d of 4 acquires succeeded, want 3", len(held))
	}
	if s, err := b.Acquire(ctx, "k", ""); err != nil || s.Allowed {
		t.Fatalf("a fourth slot: %+v %v", s, err)
	}
	if ok, err := b.Release(ctx, "k", held[0].ID); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	s, err := a.Acquire(ctx, "k", "")
	if err != nil || !s.Allowed {
		t.Fatalf("acquire after a release: %+v %v", s, err)
	}
	// The holders of held[1] and held[2] die; s keeps renewing. Their
	// slots free within the TTL, s's does not.
	died := time.Now()
	testserver.WaitFor(t, 3*ttl, 20*time.Millisecond, func() error {
		if r, err := a.Acquire(ctx, "k", s.ID); err != nil || !r.Allowed {
			return fmt.Errorf("renewal failed: %+v %v", r, err)
		}
		r, err := b.Acquire(ctx, "k", "")
		if err != nil {
			return err
		}
		if !r.Allowed {
			return errors.New("no slot freed yet")
		}
		b.Release(ctx, "k", r.ID)
		return nil
	})
	if since := time.Since(died); since > ttl+300*time.Millisecond { // the TTL, plus polling and a busy machine
		t.Fatalf("a dead holder's slot took %v to free, TTL %v", since, ttl)
	}
	a.Release(ctx, "k", s.ID)

	// Race: 12 goroutines acquire and release on two limiters; the number
	// holding a slot at once never exceeds 3.
	var inside, peak atomic.Int64
	var grants atomic.Int64
	deadline := time.Now().Add(500 * time.Millisecond)
	for i := 0; i < 12; i++ {
		lim := []*region.Limiter{a, b}[i%2]
		wg.Go(func() {
			for time.Now().Before(deadline) {
				s, err := lim.Acquire(ctx, "race", "")
				if err != nil {
					t.Error(err)
					return
				}
				if !s.Allowed {
					continue
				}
				grants.Add(1)
				n := inside.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond) // the request's work, not synchronisation
				inside.Add(-1)               // before the release: a slot is counted only while held
				if ok, err := lim.Release(ctx, "race", s.ID); err != nil || !ok {
					t.Errorf("release of a held slot: %v %v", ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("race: %d grants, peak %d holders", grants.Load(), peak.Load())
	if peak.Load() > 3 {
		t.Fatalf("%d slots held at once, limit 3", peak.Load())
	}
	if grants.Load() == 0 {
		t.Fatal("no slot granted in the race")
	}
}

// TestConcurrencyFailurePolicy: with the store cut (toxiproxy), a closed
// plan refuses slots, an open plan grants them, a degraded plan grants up
// to its share in this process; every answer flagged.
func TestConcurrencyFailurePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr)
	plans := map[string]region.Plan{
		"closed":   {Rate: 1, Capacity: 1, Concurrency: 4, FailurePolicy: region.FailClosed},
		"open":     {Rate: 1, Capacity: 1, Concurrency: 4, FailurePolicy: region.FailOpen},
		"degraded": {Rate: 1, Capacity: 1, Concurrency: 4},
		"none":     {Rate: 1, Capacity: 1},
	}
	lim, _ := newPlansLimiter(t, redisClient(t, proxy.Addr()), fmt.Sprintf("slotfail%d:", time.Now().UnixNano()), plans, func(c *region.Config) {
		c.ProcessEstimate = 2
		c.StoreTimeout = 20 * time.Millisecond
	})
	ctx := context.Background()
	if _, err := lim.Acquire(ctx, "none", ""); !errors.Is(err, region.ErrNoConcurrency) {
		t.Fatalf("Acquire for a plan without concurrency: %v", err)
	}
	if _, err := lim.Acquire(ctx, "open", "bad id"); !errors.Is(err, region.ErrInvalidLeaseID) || !strings.Contains(err.Error(), "lease_id") {
		t.Fatalf("Acquire with a bad lease id: %v", err)
	}
	proxy.Down()
	var granted []region.Slot
	count := func(key string, n int) (allowed int) {
		granted = granted[:0]
		for i := 0; i < n; i++ {
			s, err := lim.Acquire(ctx, key, "")
			if err != nil {
				t.Fatal(err)
			}
			if !s.Degraded || s.FailurePolicy != plans[key].Policy() {
				t.Fatalf("%s, store down: %+v", key, s)
			}
			if s.Allowed {
				allowed++
				granted = append(granted, s)
			}
		}
		return allowed
	}
	if n := count("closed", 5); n != 0 {
		t.Fatalf("closed plan granted %d slots with the store down", n)
	}
	if n := count("open", 5); n != 5 {
		t.Fatalf("open plan granted %d of 5 slots with the store down", n)
	}
	if n := count("degraded", 5); n != 2 {
		t.Fatalf("degraded plan granted %d slots with the store down, want 4 ÷ 2 processes = 2", n)
	}
	// A slot held in this process is released here; one it does not hold
	// cannot be released while the store is away.
	if ok, err := lim.Release(ctx, "degraded", granted[0].ID); err != nil || !ok {
		t.Fatalf("release of a local slot with the store down: %v %v", ok, err)
	}
	if s, err := lim.Acquire(ctx, "degraded", ""); err != nil || !s.Allowed {
		t.Fatalf("a local slot after a release: %+v %v", s, err)
	}
	if _, err := lim.Release(ctx, "degraded", "not-held"); !errors.Is(err, store.ErrStoreUnavailable) {
		t.Fatalf("release of an unknown slot with the store down: %v", err)
	}
}
