package region_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/redisstore"
	"github.com/quotaplatform/quota/region/store"
)

// TestLargeCostsCountedExactly: costs above 2^32 (the width usage counters
// used to have) reach the UsageSink exactly, whether the store leases them,
// refuses them for lack of tokens, or is down and the key degrades.
func TestLargeCostsCountedExactly(t *testing.T) {
	const (
		big1 = 5 << 30   // 5,368,709,120
		big2 = 1<<32 + 1 // 4,294,967,297
		all  = int64(region.MaxCapacity)
	)
	// A refill of 1 per second: the bucket moves by what is spent only.
	plan := region.Plan{Rate: 1, Capacity: region.MaxCapacity}
	stores := []struct {
		name     string
		store    func(t *testing.T) store.Store
		degraded bool
	}{
		{"memory", func(*testing.T) store.Store { return memstore.New(nil) }, false},
		{"redis", func(t *testing.T) store.Store {
			if testing.Short() {
				t.Skip("needs redis-server")
			}
			srv := testserver.StartRedis(t)
			return redisstore.New(redisClient(t, srv.Addr), fmt.Sprintf("big%d:", time.Now().UnixNano()))
		}, false},
		{"store down", func(*testing.T) store.Store { return downStore{} }, true},
	}
	steps := []struct {
		cost    int64
		allowed bool
	}{
		{big1, true},
		{big2, true},
		{all, false}, // the bucket is short of big1 + big2
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			usage := &usageLog{}
			cfg := region.DefaultConfig()
			cfg.Usage = usage
			cfg.StoreTimeout = time.Second // this test is about counting, not timeouts
			lim, err := region.New(st.store(t), region.StaticPlans{Default: plan}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i, s := range steps {
				d, err := lim.Allow(ctx, "k", s.cost)
				if err != nil {
					t.Fatalf("step %d: Allow(%d): %v", i, s.cost, err)
				}
				if d.Allowed != s.allowed || d.Degraded != st.degraded {
					t.Fatalf("step %d: Allow(%d) allowed %v degraded %v, want %v and %v", i, s.cost, d.Allowed, d.Degraded, s.allowed, st.degraded)
				}
			}
			lim.Drain(ctx)
			want := region.Usage{Key: "k", Spent: big1 + big2, Leased: big1 + big2, Rejected: all}
			if st.degraded {
				want.Leased, want.Degraded = 0, big1+big2
			}
			if got := usage.totals()["k"]; got != want {
				t.Fatalf("usage %+v, want %+v", got, want)
			}
		})
	}
}
