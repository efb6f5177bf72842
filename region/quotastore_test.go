package region_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region"
)

// quotaStores are the QuotaStore implementations under the same contract:
// the in-process store and a real Redis.
func quotaStores(t *testing.T) map[string]region.QuotaStore {
	t.Helper()
	stores := map[string]region.QuotaStore{"memory": region.NewMemoryStore(nil)}
	if !testing.Short() {
		srv := testserver.StartRedis(t)
		stores["redis"] = region.NewRedisStore(redisClient(t, srv.Addr), fmt.Sprintf("qc%d:", time.Now().UnixNano()))
	}
	return stores
}

// TestQuotaStoreContract walks each store through the same calls: grants
// within the region's allowance (base region + share × (limit − base
// total)), the same grant from every period's counter, nothing below Min,
// returns, newer bases only, and refusals naming the field.
func TestQuotaStoreContract(t *testing.T) {
	month := period.Calendar{}
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	ms, me := month.Bounds(period.Month, now)
	ds, de := month.Bounds(period.Day, now)
	m := func(limit int64, share float64) region.QuotaPeriod {
		return region.QuotaPeriod{Unit: period.Month, Start: ms, End: me, Limit: limit, Share: share}
	}
	d := func(limit int64, share float64) region.QuotaPeriod {
		return region.QuotaPeriod{Unit: period.Day, Start: ds, End: de, Limit: limit, Share: share}
	}
	withReturn := func(p region.QuotaPeriod, n int64) region.QuotaPeriod { p.Return = n; return p }
	withBase := func(p region.QuotaPeriod, total, reg int64, at time.Time) region.QuotaPeriod {
		p.Base = &region.QuotaBaseIn{Total: total, Region: reg, AsOf: at}
		return p
	}
	type step struct {
		periods     []region.QuotaPeriod
		want, min   int64
		charge      int64
		granted     int64
		used, allow []int64 // per period after the call
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"grants within share × limit, then what is left", []step{
			{periods: []region.QuotaPeriod{m(100, 0.5)}, want: 30, min: 1, granted: 30, used: []int64{30}, allow: []int64{50}},
			{periods: []region.QuotaPeriod{m(100, 0.5)}, want: 30, min: 1, granted: 20, used: []int64{50}, allow: []int64{50}},
			{periods: []region.QuotaPeriod{m(100, 0.5)}, want: 5, min: 1, granted: 0, used: []int64{50}, allow: []int64{50}},
		}},
		{"nothing below min, and nothing written", []step{
			{periods: []region.QuotaPeriod{m(10, 1)}, want: 7, min: 7, granted: 7, used: []int64{7}, allow: []int64{10}},
			{periods: []region.QuotaPeriod{m(10, 1)}, want: 5, min: 4, granted: 0, used: []int64{7}, allow: []int64{10}},
		}},
		{"returns go back, never below zero", []step{
			{periods: []region.QuotaPeriod{m(10, 1)}, want: 8, min: 1, granted: 8, used: []int64{8}, allow: []int64{10}},
			{periods: []region.QuotaPeriod{withReturn(m(10, 1), 3)}, granted: 0, used: []int64{5}, allow: []int64{10}},
			{periods: []region.QuotaPeriod{withReturn(m(10, 1), 50)}, granted: 0, used: []int64{0}, allow: []int64{10}},
		}},
		{"every period grants the same: the tightest", []step{
			{periods: []region.QuotaPeriod{m(1000, 1), d(20, 1)}, want: 15, min: 1, granted: 15, used: []int64{15, 15}, allow: []int64{1000, 20}},
			{periods: []region.QuotaPeriod{m(1000, 1), d(20, 1)}, want: 15, min: 1, granted: 5, used: []int64{20, 20}, allow: []int64{1000, 20}},
		}},
		{"a base: the region's share of what remains, and at least its ledger spend", []step{
			{periods: []region.QuotaPeriod{m(100, 0.5)}, want: 10, min: 1, granted: 10, used: []int64{10}, allow: []int64{50}},
			// The ledger says the fleet spent 60, this region 40: used rises
			// to 40, the allowance is 40 + 0.5 × 40.
			{periods: []region.QuotaPeriod{withBase(m(100, 0.5), 60, 40, now)}, want: 30, min: 1, granted: 20, used: []int64{60}, allow: []int64{60}},
			// An older base changes nothing.
			{periods: []region.QuotaPeriod{withBase(m(100, 0.5), 0, 0, now.Add(-time.Hour))}, want: 1, min: 1, granted: 0, used: []int64{60}, allow: []int64{60}},
		}},
		{"a charge is added past the allowance, after returns, and leaves no room", []step{
			{periods: []region.QuotaPeriod{m(10, 1)}, want: 6, min: 1, granted: 6, used: []int64{6}, allow: []int64{10}},
			{periods: []region.QuotaPeriod{withReturn(m(10, 1), 2)}, charge: 9, want: 1, min: 1, granted: 0, used: []int64{13}, allow: []int64{10}},
		}},
		{"a base past the limit leaves no room", []step{
			{periods: []region.QuotaPeriod{withBase(m(100, 0.5), 120, 30, now)}, want: 1, min: 0, granted: 0, used: []int64{30}, allow: []int64{20}},
		}},
	}
	for name, st := range quotaStores(t) {
		for i, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				key := fmt.Sprintf("quota-%d-%d", i, time.Now().UnixNano())
				for j, s := range tc.steps {
					rep, err := st.LeaseQuota(context.Background(), region.QuotaCall{Key: key, Periods: s.periods, Want: s.want, Min: s.min, Charge: s.charge})
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
					}
				}
			})
		}
		t.Run(name+"/concurrent leases never pass the allowance", func(t *testing.T) {
			key := fmt.Sprintf("quota-race-%d", time.Now().UnixNano())
			var mu sync.Mutex
			var total int64
			var wg sync.WaitGroup
			for range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						rep, err := st.LeaseQuota(context.Background(), region.QuotaCall{Key: key, Periods: []region.QuotaPeriod{m(100, 1), d(90, 1)}, Want: 7})
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
		t.Run(name+"/bad calls name the field", func(t *testing.T) {
			for _, tc := range []struct {
				call  region.QuotaCall
				field string
			}{
				{region.QuotaCall{Key: "", Periods: []region.QuotaPeriod{m(1, 1)}}, "Key"},
				{region.QuotaCall{Key: "k"}, "Periods"},
				{region.QuotaCall{Key: "k", Periods: []region.QuotaPeriod{m(1, 1), m(2, 1)}}, "Periods[1].Unit"},
				{region.QuotaCall{Key: "k", Periods: []region.QuotaPeriod{m(0, 1)}}, "Periods[0].Limit"},
				{region.QuotaCall{Key: "k", Periods: []region.QuotaPeriod{m(1, 0)}}, "Periods[0].Share"},
				{region.QuotaCall{Key: "k", Periods: []region.QuotaPeriod{m(1, 1)}, Want: 1, Min: 2}, "Min"},
				{region.QuotaCall{Key: "k", Periods: []region.QuotaPeriod{m(1, 1)}, Charge: -1}, "Charge"},
				{region.QuotaCall{Key: "k", Periods: []region.QuotaPeriod{{Unit: period.Day, Start: de, End: ds, Limit: 1, Share: 1}}}, "Periods[0].End"},
			} {
				_, err := st.LeaseQuota(context.Background(), tc.call)
				if !errors.Is(err, region.ErrStoreRejected) || !strings.Contains(err.Error(), tc.field) {
					t.Errorf("%+v: err %v, want a refusal naming %s", tc.call, err, tc.field)
				}
			}
		})
	}
}

// TestQuotaCountersExpire: a counter lives until a day after its period's
// end (the in-process store on a manual clock; Redis' expiry time is
// read back).
func TestQuotaCountersExpire(t *testing.T) {
	clk := newManualClock()
	st := region.NewMemoryStore(clk)
	start := clk.Now()
	p := region.QuotaPeriod{Unit: period.Hour, Start: start, End: start.Add(time.Hour), Limit: 10, Share: 1}
	call := region.QuotaCall{Key: "acct_exp", Periods: []region.QuotaPeriod{p}, Want: 4}
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
	if testing.Short() {
		return
	}
	srv := testserver.StartRedis(t)
	rdb := redisClient(t, srv.Addr)
	rs := region.NewRedisStore(rdb, "qexp:")
	now := time.Now()
	p = region.QuotaPeriod{Unit: period.Day, Start: now.Add(-time.Hour), End: now.Add(time.Hour), Limit: 10, Share: 1}
	if _, err := rs.LeaseQuota(context.Background(), region.QuotaCall{Key: "acct_exp", Periods: []region.QuotaPeriod{p}, Want: 1}); err != nil {
		t.Fatal(err)
	}
	ttl, err := rdb.PTTL(context.Background(), rs.QuotaKey("acct_exp", period.Day, p.Start)).Result()
	if err != nil || ttl < 24*time.Hour || ttl > 25*time.Hour {
		t.Fatalf("counter TTL %v (%v), want about 25 h: a day after the period's end", ttl, err)
	}
}
