package region

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// TestSweep: each sweep gives back the permits of the leases expired by
// then, and no others. Two keys lease 3 s apart; the clock steps over fixed
// instants and the test calls the sweep Run would make at each.
func TestSweep(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewManual(t0)
	cfg := DefaultConfig()
	cfg.Clock = clk
	lim, err := New(memstore.New(clk), StaticPlans{Default: Plan{Rate: 1000, Capacity: 1000}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease := func(key string) int64 {
		t.Helper()
		for range 40 {
			if _, err := lim.Allow(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
		}
		ks, err := lim.Peek(key)
		if err != nil || ks.Lease == 0 {
			t.Fatalf("%s holds no lease after 40 decisions: %+v %v", key, ks, err)
		}
		return ks.Lease
	}
	first := lease("first")
	clk.Set(t0.Add(3 * time.Second))
	second := lease("second")

	steps := []struct {
		at   time.Duration // since t0; LeaseTTL is 5s
		back int64
		held map[string]bool // keys still holding a lease after the sweep
	}{
		{3 * time.Second, 0, map[string]bool{"first": true, "second": true}},
		{5*time.Second - time.Millisecond, 0, map[string]bool{"first": true, "second": true}},
		{5 * time.Second, first, map[string]bool{"second": true}},
		{7 * time.Second, 0, map[string]bool{"second": true}},
		{8 * time.Second, second, nil},
		{9 * time.Second, 0, nil},
	}
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		if back := lim.sweeper.sweep(ctx); back != s.back {
			t.Fatalf("step %d (t0+%v): the sweep gave back %d permits, want %d", i, s.at, back, s.back)
		}
		for _, key := range []string{"first", "second"} {
			ks, _ := lim.Peek(key)
			if (ks.Lease > 0) != s.held[key] {
				t.Fatalf("step %d (t0+%v): %s holds %d permits, want a lease %v", i, s.at, key, ks.Lease, s.held[key])
			}
		}
	}
	if n := lim.Stats().OutstandingPermits; n != 0 {
		t.Fatalf("%d permits outstanding after every lease expired", n)
	}
}

// refusingStore refuses, for reasons of the key's own, every call of one
// key that gives permits back.
type refusingStore struct {
	store.Store
	key string
}

func (s refusingStore) Lease(ctx context.Context, req store.LeaseRequest) (store.LeaseReply, error) {
	if req.Key == s.key && req.Return > 0 {
		return store.LeaseReply{}, fmt.Errorf("%w: WRONGTYPE", store.ErrStoreRejected)
	}
	return s.Store.Lease(ctx, req)
}

// TestSweepDropsRefusedReturns: a return the store refuses for its key is
// dropped, the sweep goes on with the other keys' returns, and the breaker
// counts nothing.
func TestSweepDropsRefusedReturns(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewManual(t0)
	cfg := DefaultConfig()
	cfg.Clock = clk
	lim, err := New(refusingStore{memstore.New(clk), "bad"}, StaticPlans{Default: Plan{Rate: 1000, Capacity: 1000}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"bad"}
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("good-%d", i))
	}
	var held int64
	for _, k := range keys {
		for range 40 {
			if _, err := lim.Allow(ctx, k, 1); err != nil {
				t.Fatal(err)
			}
		}
		ks, _ := lim.Peek(k)
		held += ks.Lease
	}
	bad, _ := lim.Peek("bad")
	if bad.Lease == 0 {
		t.Fatal("bad holds no lease")
	}
	clk.Set(t0.Add(cfg.LeaseTTL))
	if back := lim.sweeper.sweep(ctx); back != held-bad.Lease {
		t.Fatalf("the sweep gave back %d permits, want %d: every good key's", back, held-bad.Lease)
	}
	s := lim.Stats()
	if s.Breaker != BreakerClosed || s.BreakerFailures != 0 || s.KeyErrors != 1 || s.OutstandingPermits != 0 {
		t.Fatalf("after the sweep: %+v, want the breaker closed, no failure, 1 key error, nothing outstanding", s)
	}
	if back := lim.sweeper.sweep(ctx); back != 0 || lim.Stats().StoreCalls != s.StoreCalls {
		t.Fatalf("the next sweep gave back %d permits: the refused return was kept", back)
	}
}
