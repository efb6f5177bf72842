package region

import (
	"context"
	"hash/maphash"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// inFlightQuotaStore runs during every quota call, while the caller's
// shard is unlocked, before passing the call on.
type inFlightQuotaStore struct {
	*memstore.Store
	during func()
}

func (s inFlightQuotaStore) LeaseQuota(ctx context.Context, call store.QuotaCall) (store.QuotaReply, error) {
	s.during()
	return s.Store.LeaseQuota(ctx, call)
}

// TestQuotaCallLeavesFastPathNothing: while a key's quota call is in
// flight, the fast path (every check of the key another goroutine makes
// meanwhile) finds no permit on the entry that the quota lease does not
// cover, so a month quota of 10 admits 10 checks however many the fast
// path is asked during the calls.
func TestQuotaCallLeavesFastPathNothing(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	qs, err := NewQuotas([]Quota{{Period: period.Month, Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	plan := Plan{Rate: 1e6, Capacity: 1e6, Quotas: qs}
	const key = "acct"
	var lim *Limiter
	calls, during := 0, 0
	st := inFlightQuotaStore{Store: memstore.New(clk), during: func() {
		calls++
		sh := lim.shardOf(maphash.String(lim.seed, key))
		sh.mu.Lock()
		defer sh.mu.Unlock()
		e := sh.keys[key]
		for range 20 {
			var d Decision
			if ok, err := lim.decideLocked(sh, key, e, lim.now(), 1, &d); err != nil {
				t.Error(err)
			} else if ok && d.Allowed {
				during++
			}
		}
	}}
	cfg := DefaultConfig()
	cfg.Clock = clk
	if lim, err = New(st, StaticPlans{Default: plan}, cfg); err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for range 60 {
		d, err := lim.Allow(context.Background(), key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if calls == 0 {
		t.Fatal("no quota call was made")
	}
	if allowed+during != 10 {
		t.Fatalf("admitted %d checks and %d on the fast path during %d quota calls, want 10 in all", allowed, during, calls)
	}
}
