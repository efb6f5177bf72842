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
// shard is unlocked, before passing the call on; an error it returns is
// the call's.
type inFlightQuotaStore struct {
	*memstore.Store
	during func() error
}

func (s inFlightQuotaStore) LeaseQuota(ctx context.Context, call store.QuotaCall) (store.QuotaReply, error) {
	if err := s.during(); err != nil {
		return store.QuotaReply{}, err
	}
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
	st := inFlightQuotaStore{Store: memstore.New(clk), during: func() error {
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
		return nil
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

// TestQuotaCallFailsAfterLeaseGranted: when a key's lease call is granted
// and its quota call then fails, the check is decided degraded (flagged,
// allowed from the degraded bucket and the quotas' degraded budget), the
// granted lease is kept, and the degraded spend stays owed to the store
// until the next successful lease call charges it.
func TestQuotaCallFailsAfterLeaseGranted(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	qs, err := NewQuotas([]Quota{{Period: period.Month, Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	const key = "acct"
	down := true
	st := inFlightQuotaStore{Store: memstore.New(clk), during: func() error {
		if down {
			return store.ErrStoreUnavailable
		}
		return nil
	}}
	cfg := DefaultConfig()
	cfg.Clock = clk
	lim, err := New(st, StaticPlans{Default: Plan{Rate: 100, Capacity: 100, Quotas: qs}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := lim.Allow(ctx, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || !d.Degraded {
		t.Fatalf("first check with the quota call failing: %+v, want allowed, degraded", d)
	}
	sh := lim.shardOf(maphash.String(lim.seed, key))
	state := func() (debt, leased int64, degraded bool) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if b := sh.buckets[key]; b != nil {
			debt = b.debt
		}
		e := sh.keys[key]
		return debt, e.permits + sh.quotas[key].extraRate, e.inDegraded
	}
	if debt, leased, degraded := state(); debt != 1 || leased < 1 || !degraded {
		t.Fatalf("after it: debt %d, rate lease %d, degraded %v; want debt 1, the granted lease kept, degraded", debt, leased, degraded)
	}
	down = false
	clk.Advance(2 * cfg.BreakerCooldown)
	for i := 0; ; i++ {
		d, err = lim.Allow(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if debt, _, degraded := state(); debt == 0 && !degraded {
			break
		}
		if i == 100 {
			t.Fatalf("the degraded debt was never charged: last decision %+v", d)
		}
		clk.Advance(cfg.LeaseTTL)
	}
	if !d.Allowed || d.Degraded {
		t.Fatalf("with the store back: %+v, want allowed, not degraded", d)
	}
}
