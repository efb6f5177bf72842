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

// TestConformance runs the store contract's suite on a manual clock set to
// today and to the calendar's edges: the suite takes its time from the
// store, so it must pass at any instant the store's clock reads.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   time.Time
	}{
		{"today", time.Now().Truncate(time.Second)},
		{"the last second of a month", time.Date(2027, 1, 31, 22, 59, 59, 0, time.UTC)}, // 23:59:59 in Berlin, the suite's zone
		{"the last second of a year", time.Date(2027, 12, 31, 23, 59, 59, 0, time.UTC)},
		{"29 February", time.Date(2028, 2, 29, 11, 0, 0, 0, time.UTC)},
		{"a daylight saving change", time.Date(2027, 3, 28, 0, 59, 59, 0, time.UTC)}, // a second before Berlin's clocks go forward
		{"the day clocks go back", time.Date(2027, 10, 31, 12, 0, 0, 0, time.UTC)},   // a 25-hour day in Berlin
		{"a Monday", time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) (store.Store, func(time.Duration)) {
				clk := clock.NewManual(tc.at)
				return memstore.New(clk), clk.Advance
			})
		})
	}
}

// TestQuotaCountersExpire: a counter lives until a day after its period's
// end (store.QuotaTTL); past that the period grants nothing.
func TestQuotaCountersExpire(t *testing.T) {
	clk := clock.NewManual(time.Date(2027, 2, 28, 23, 0, 0, 0, time.UTC))
	st := memstore.New(clk)
	start := clk.Now()
	p := store.QuotaPeriod{Unit: period.Hour, Start: start, End: start.Add(time.Hour), Limit: 10, Share: 1}
	call := store.QuotaCall{Key: "acct_exp", Periods: []store.QuotaPeriod{p}, Want: 4}
	if rep, err := st.LeaseQuota(context.Background(), call); err != nil || rep.Counters[0].Used != 4 {
		t.Fatalf("first lease: %+v %v", rep, err)
	}
	clk.Advance(time.Hour + 23*time.Hour)
	if rep, _ := st.LeaseQuota(context.Background(), call); rep.Counters[0].Used != 8 || rep.Granted != 4 {
		t.Fatalf("a day after the end, less a second: used %d granted %d, want 8 and 4 (kept, still bounded)", rep.Counters[0].Used, rep.Granted)
	}
	clk.Advance(time.Hour + time.Second)
	if rep, _ := st.LeaseQuota(context.Background(), call); !rep.Counters[0].Ended || rep.Granted != 0 {
		t.Fatalf("past a day after the end: %+v, want the period ended and nothing granted", rep)
	}
}
