package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/store"
)

// testQuota runs the QuotaStore contract (docs/design.md [quotas]) when
// the store implements it: grants within the region's allowance (base
// region + share × (limit − base total)), the same grant from every
// period's counter, nothing below Min, returns, newer bases only, and
// refusals naming the field; a period that ended is counted while its
// counter lives, and past that grants nothing.
//
// Every period is built from the store's own clock (storeNow), in a zone
// with daylight saving time, so that the answers hold on any day the suite
// runs and at any instant a store's clock is set to.
func testQuota(t *testing.T, open Opener) {
	s, _ := open(t)
	st, ok := s.(store.QuotaStore)
	if !ok {
		t.Skipf("%T keeps no quota counters", s)
	}
	cal := suiteCalendar(t)
	now := storeNow(t, s)
	ms, me := cal.Bounds(period.Month, now)
	ds, de := cal.Bounds(period.Day, now)
	m := func(limit int64, share float64) store.QuotaPeriod {
		return store.QuotaPeriod{Unit: period.Month, Start: ms, End: me, Limit: limit, Share: share}
	}
	d := func(limit int64, share float64) store.QuotaPeriod {
		return store.QuotaPeriod{Unit: period.Day, Start: ds, End: de, Limit: limit, Share: share}
	}
	// hourEnded is an hour that ended ago before now.
	hourEnded := func(limit int64, ago time.Duration) store.QuotaPeriod {
		end := now.Add(-ago).Truncate(time.Hour)
		return store.QuotaPeriod{Unit: period.Hour, Start: end.Add(-time.Hour), End: end, Limit: limit, Share: 1}
	}
	withReturn := func(p store.QuotaPeriod, n int64) store.QuotaPeriod { p.Return = n; return p }
	withBase := func(p store.QuotaPeriod, total, reg int64, at time.Time) store.QuotaPeriod {
		p.Base = &store.QuotaBaseIn{Total: total, Region: reg, AsOf: at}
		return p
	}
	type step struct {
		periods     []store.QuotaPeriod
		want, min   int64
		charge      int64
		granted     int64
		used, allow []int64 // per period after the call
		ended       []bool  // per period; nil: none ended
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"grants within share × limit, then what is left", []step{
			{periods: []store.QuotaPeriod{m(100, 0.5)}, want: 30, min: 1, granted: 30, used: []int64{30}, allow: []int64{50}},
			{periods: []store.QuotaPeriod{m(100, 0.5)}, want: 30, min: 1, granted: 20, used: []int64{50}, allow: []int64{50}},
			{periods: []store.QuotaPeriod{m(100, 0.5)}, want: 5, min: 1, granted: 0, used: []int64{50}, allow: []int64{50}},
		}},
		{"nothing below min, and nothing written", []step{
			{periods: []store.QuotaPeriod{m(10, 1)}, want: 7, min: 7, granted: 7, used: []int64{7}, allow: []int64{10}},
			{periods: []store.QuotaPeriod{m(10, 1)}, want: 5, min: 4, granted: 0, used: []int64{7}, allow: []int64{10}},
		}},
		{"returns go back, never below zero", []step{
			{periods: []store.QuotaPeriod{m(10, 1)}, want: 8, min: 1, granted: 8, used: []int64{8}, allow: []int64{10}},
			{periods: []store.QuotaPeriod{withReturn(m(10, 1), 3)}, granted: 0, used: []int64{5}, allow: []int64{10}},
			{periods: []store.QuotaPeriod{withReturn(m(10, 1), 50)}, granted: 0, used: []int64{0}, allow: []int64{10}},
		}},
		{"every period grants the same: the tightest", []step{
			{periods: []store.QuotaPeriod{m(1000, 1), d(20, 1)}, want: 15, min: 1, granted: 15, used: []int64{15, 15}, allow: []int64{1000, 20}},
			{periods: []store.QuotaPeriod{m(1000, 1), d(20, 1)}, want: 15, min: 1, granted: 5, used: []int64{20, 20}, allow: []int64{1000, 20}},
		}},
		{"a base: the region's share of what remains, and at least its ledger spend", []step{
			{periods: []store.QuotaPeriod{m(100, 0.5)}, want: 10, min: 1, granted: 10, used: []int64{10}, allow: []int64{50}},
			// The ledger says the fleet spent 60, this region 40: used rises
			// to 40, the allowance is 40 + 0.5 × 40.
			{periods: []store.QuotaPeriod{withBase(m(100, 0.5), 60, 40, now)}, want: 30, min: 1, granted: 20, used: []int64{60}, allow: []int64{60}},
			// An older base changes nothing.
			{periods: []store.QuotaPeriod{withBase(m(100, 0.5), 0, 0, now.Add(-time.Hour))}, want: 1, min: 1, granted: 0, used: []int64{60}, allow: []int64{60}},
		}},
		{"a charge is added past the allowance, after returns, and leaves no room", []step{
			{periods: []store.QuotaPeriod{m(10, 1)}, want: 6, min: 1, granted: 6, used: []int64{6}, allow: []int64{10}},
			{periods: []store.QuotaPeriod{withReturn(m(10, 1), 2)}, charge: 9, want: 1, min: 1, granted: 0, used: []int64{13}, allow: []int64{10}},
		}},
		{"a base past the limit leaves no room", []step{
			{periods: []store.QuotaPeriod{withBase(m(100, 0.5), 120, 30, now)}, want: 1, min: 0, granted: 0, used: []int64{30}, allow: []int64{20}},
		}},
		{"a base below zero counts as none spent", []step{
			// Another region's refunds past what it spent (a forged
			// report) must not lift this region's allowance past
			// share × limit.
			{periods: []store.QuotaPeriod{withBase(m(100, 0.5), -1_000_000, 0, now)}, want: 80, min: 1, granted: 50, used: []int64{50}, allow: []int64{50}},
		}},
		{"a region's base is at most the fleet's", []step{
			// A total below the region's own spend (another region's
			// forged refunds) counts the region's as the total: the
			// counter reads share × limit, not 40 + share × limit.
			{periods: []store.QuotaPeriod{withBase(m(100, 0.5), 0, 40, now)}, want: 80, min: 1, granted: 50, used: []int64{50}, allow: []int64{50}},
		}},
		{"a period that ended is counted while its counter lives", []step{
			{periods: []store.QuotaPeriod{hourEnded(10, time.Hour)}, want: 6, min: 1, granted: 6, used: []int64{6}, allow: []int64{10}},
			{periods: []store.QuotaPeriod{hourEnded(10, time.Hour)}, want: 6, min: 1, granted: 4, used: []int64{10}, allow: []int64{10}},
		}},
		{"past its counter's life a period grants nothing and keeps nothing", []step{
			// The month still takes the charge; the ended hour is not
			// written, so asking again finds it ended again.
			{periods: []store.QuotaPeriod{m(100, 1), hourEnded(10, store.QuotaTTL+2*time.Hour)}, charge: 3, want: 5, min: 1, granted: 0, used: []int64{3, 0}, allow: []int64{100, 0}, ended: []bool{false, true}},
			{periods: []store.QuotaPeriod{hourEnded(10, store.QuotaTTL+2*time.Hour)}, want: 5, min: 0, granted: 0, used: []int64{0}, allow: []int64{0}, ended: []bool{true}},
			{periods: []store.QuotaPeriod{m(100, 1)}, want: 5, min: 1, granted: 5, used: []int64{8}, allow: []int64{100}},
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("quota-%d-%d", i, time.Now().UnixNano())
			for j, s := range tc.steps {
				rep, err := st.LeaseQuota(context.Background(), store.QuotaCall{Key: key, Periods: s.periods, Want: s.want, Min: s.min, Charge: s.charge})
				if err != nil {
					t.Fatalf("step %d: %v", j, err)
				}
				if rep.Granted != s.granted {
					t.Fatalf("step %d: granted %d, want %d", j, rep.Granted, s.granted)
				}
				for k := range s.periods {
					if c := rep.Counters[k]; c.Used != s.used[k] || c.Allowance != s.allow[k] {
						t.Fatalf("step %d period %d: used %d allowance %d, want %d and %d", j, k, c.Used, c.Allowance, s.used[k], s.allow[k])
					}
					if ended := s.ended != nil && s.ended[k]; rep.Counters[k].Ended != ended {
						t.Fatalf("step %d period %d: ended %v, want %v", j, k, rep.Counters[k].Ended, ended)
					}
				}
			}
		})
	}
	t.Run("concurrent leases never pass the allowance", func(t *testing.T) {
		key := fmt.Sprintf("quota-race-%d", time.Now().UnixNano())
		var mu sync.Mutex
		var total int64
		var wg sync.WaitGroup
		for range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					rep, err := st.LeaseQuota(context.Background(), store.QuotaCall{Key: key, Periods: []store.QuotaPeriod{m(100, 1), d(90, 1)}, Want: 7})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					total += rep.Granted
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if total != 90 {
			t.Fatalf("granted %d in all, want the day's 90 exactly", total)
		}
	})
	t.Run("bad calls name the field", func(t *testing.T) {
		for _, tc := range []struct {
			call  store.QuotaCall
			field string
		}{
			{store.QuotaCall{Key: "", Periods: []store.QuotaPeriod{m(1, 1)}}, "Key"},
			{store.QuotaCall{Key: "k"}, "Periods"},
			{store.QuotaCall{Key: "k", Periods: []store.QuotaPeriod{m(1, 1), m(2, 1)}}, "Periods[1].Unit"},
			{store.QuotaCall{Key: "k", Periods: []store.QuotaPeriod{m(0, 1)}}, "Periods[0].Limit"},
			{store.QuotaCall{Key: "k", Periods: []store.QuotaPeriod{m(1, 0)}}, "Periods[0].Share"},
			{store.QuotaCall{Key: "k", Periods: []store.QuotaPeriod{m(1, 1)}, Want: 1, Min: 2}, "Min"},
			{store.QuotaCall{Key: "k", Periods: []store.QuotaPeriod{m(1, 1)}, Charge: -1}, "Charge"},
			{store.QuotaCall{Key: "k", Periods: []store.QuotaPeriod{{Unit: period.Day, Start: de, End: ds, Limit: 1, Share: 1}}}, "Periods[0].End"},
		} {
			_, err := st.LeaseQuota(context.Background(), tc.call)
			if !errors.Is(err, store.ErrStoreRejected) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%+v: err %v, want a refusal naming %s", tc.call, err, tc.field)
			}
		}
	})
}
