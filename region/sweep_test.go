package region

import (
	"context"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
)

// TestSweep: each sweep gives back the permits of the leases expired by
// then, and no others. Two keys lease 3 s apart; the clock steps over fixed
// instants and the test calls the sweep Run would make at each.
func TestSweep(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewManual(t0)
	cfg := DefaultConfig()
	cfg.Clock = clk
	lim, err := New(NewMemoryStore(clk), StaticPlans{Default: Plan{Rate: 1000, Capacity: 1000}}, cfg)
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
		if back := lim.sweep(ctx); back != s.back {
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
