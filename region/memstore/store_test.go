package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
	"github.com/quotaplatform/quota/region/store/storetest"
)

// TestConformance runs the store contract's suite on a manual clock.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (store.Store, func(time.Duration)) {
		clk := clock.NewManual(time.Now().Truncate(time.Second))
		return memstore.New(clk), clk.Advance
	})
}

// TestQuotaCountersExpire: a counter lives until a day after its period's
// end (store.QuotaTTL).
func TestQuotaCountersExpire(t *testing.T) {
	clk := clock.NewManual(time.Now().Truncate(time.Second))
	st := memstore.New(clk)
	start := clk.Now()
	p := store.QuotaPeriod{Unit: period.Hour, Start: start, End: start.Add(time.Hour), Limit: 10, Share: 1}
	call := store.QuotaCall{Key: "acct_exp", Periods: []store.QuotaPeriod{p}, Want: 4}
	if rep, err := st.LeaseQuota(context.Background(), call); err != nil || rep.Counters[0].Used != 4 {
		t.Fatalf("first lease: %+v %v", rep, err)
	}
	clk.Advance(time.Hour + 23*time.Hour)
	if rep, _ := st.LeaseQuota(context.Background(), call); rep.Counters[0].Used != 8 {
		t.Fatalf("a day after the end, less a second: used %d, want 8 (kept)", rep.Counters[0].Used)
	}
	clk.Advance(time.Hour + time.Second)
	if rep, _ := st.LeaseQuota(context.Background(), call); rep.Counters[0].Used != 4 {
		t.Fatalf("past a day after the end: used %d, want 4 (a new counter)", rep.Counters[0].Used)
	}
}
