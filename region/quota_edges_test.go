package region_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/redisstore"
	"github.com/quotaplatform/quota/region/store"
)

// TestQuotaRequestIDsRefundsAndCharges: checks with request ids spend
// the quotas once per id (a retry is replayed and charged nothing), a
// refund gives its cost back to the quotas and a post-hoc charge takes
// its cost from them, each once, on the in-process store and on a real
// Redis.
func TestQuotaRequestIDsRefundsAndCharges(t *testing.T) {
	stores := map[string]func() (store.Store, *clock.Manual){"memory": func() (store.Store, *clock.Manual) {
		clk := newManualClock()
		return memstore.New(clk), clk
	}}
	if !testing.Short() {
		srv := testserver.StartRedis(t)
		rdb := redisClient(t, srv.Addr)
		stores["redis"] = func() (store.Store, *clock.Manual) {
			return redisstore.New(rdb, fmt.Sprintf("qr%d:", time.Now().UnixNano())), storeClock(t, rdb)
		}
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, clk := open()
			zone, anchor := midPeriod(clk.Now())
			plan := monthPlan(t, 10, zone, anchor)
			plan.Rate, plan.Capacity = 1e6, 1e6
			book := &bookLedger{clock: clk}
			// No ledger bases: a base read before a refund reached the
			// ledger would raise the counter back over it (an
			// under-admission that docs/design.md [quotas] states), and
			// this test counts exactly.
			r := newQuotaRegion(t, "eu", st, plan, clk, book, 1, func(c *region.Config) { c.QuotaBases = nil })
			const key = "acct-ids"
			check := func(id string) region.Decision {
				t.Helper()
				d, err := r.lim.AllowRequest(ctx, key, 1, id)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			for i := range 10 {
				if d := check(fmt.Sprintf("req-%d", i)); !d.Allowed || d.Replayed {
					t.Fatalf("req-%d: %+v, want allowed", i, d)
				}
			}
			for i := range 3 {
				if d := check("req-4"); !d.Allowed || !d.Replayed {
					t.Fatalf("retry %d of req-4: %+v, want the first decision, replayed", i, d)
				}
			}
			if d := check("req-10"); d.Allowed || !d.QuotaRejected() {
				t.Fatalf("req-10 past the quota of 10: %+v, want refused for the quota", d)
			}
			// A refund of req-3 gives one back (sent by the next sweep; Drain
			// sends it now); the same refund again changes nothing.
			for range 2 {
				if _, err := r.lim.Refund(ctx, key, 1, "req-3"); err != nil {
					t.Fatal(err)
				}
			}
			r.lim.Drain(ctx)
			clk.Advance(6 * time.Second) // past the local rejection of the spent quota
			if d := check("req-11"); !d.Allowed {
				t.Fatalf("req-11 after a refund of 1: %+v, want allowed", d)
			}
			clk.Advance(6 * time.Second)
			if d := check("req-12"); d.Allowed {
				t.Fatalf("req-12: %+v, want refused: the refund gave back one, once", d)
			}
			// A post-hoc charge of 3 puts the quota in debt: after a refund
			// of 3 the key is still at its quota.
			if _, err := r.lim.Charge(ctx, key, 3, "req-11"); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"req-5", "req-6", "req-7"} {
				if _, err := r.lim.Refund(ctx, key, 1, id); err != nil {
					t.Fatal(err)
				}
			}
			r.lim.Drain(ctx)
			clk.Advance(6 * time.Second)
			if d := check("req-13"); d.Allowed {
				t.Fatalf("req-13: %+v, want refused: a charge of 3 and refunds of 3 leave the quota spent", d)
			}
			if _, err := r.lim.Refund(ctx, key, 1, "req-8"); err != nil {
				t.Fatal(err)
			}
			r.lim.Drain(ctx)
			clk.Advance(6 * time.Second)
			if d := check("req-14"); !d.Allowed {
				t.Fatalf("req-14: %+v %+v, want allowed after one more refund", d, d.Quotas())
			}
		})
	}
}

// TestQuotaWhileStoreDown: with the link to a real Redis cut (a toxiproxy
// proxy), a key with a quota is decided degraded, flagged, within the
// quota lease it held plus its share of what the region could still lease;
// after recovery what it spent is charged to the counters, so that the
// fleet never admits past the quota: one process here admits exactly the
// quota across the outage.
func TestQuotaWhileStoreDown(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	const limit, key = 200, "acct-outage"
	zone, anchor := midPeriod(storeClock(t, rdb).Now())
	plan := monthPlan(t, limit, zone, anchor)
	plan.Rate, plan.Capacity = 1e6, 1e6
	book := &bookLedger{clock: clock.System()}
	cfg := region.DefaultConfig()
	cfg.Region = "eu"
	// The 100 healthy checks below must never reach it under load (as
	// 20 ms did in TestFailurePolicyThroughOutage); it costs the outage
	// about 1.3 s.
	cfg.StoreTimeout = 500 * time.Millisecond
	cfg.BreakerCooldown = 20 * time.Millisecond
	cfg.Usage = book.sink("eu")
	cfg.QuotaBases = book
	lim, err := region.New(redisstore.New(rdb, fmt.Sprintf("qd%d:", time.Now().UnixNano())), region.StaticPlans{Default: plan}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var allowed, degraded, flaggedRejections int64
	check := func() region.Decision {
		d, err := lim.Allow(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
			if d.Degraded {
				degraded++
			}
		} else if d.Degraded {
			flaggedRejections++
			if !d.QuotaRejected() || len(d.Quotas()) != 2 || d.Remaining != 0 || d.Tightest() != period.Month {
				t.Fatalf("a degraded refusal with room in the bucket: %+v %+v, want it refused for the quota, listed", d, d.Quotas())
			}
		}
		return d
	}
	for range 100 {
		if d := check(); !d.Allowed || d.Degraded {
			t.Fatalf("healthy store: %+v", d)
		}
	}
	proxy.Down()
	for range 300 {
		check()
	}
	if degraded == 0 || flaggedRejections == 0 {
		t.Fatalf("while the store was down: %d allowed degraded, %d refused flagged; want both", degraded, flaggedRejections)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		d := check()
		if !d.Degraded {
			break
		}
		if i > 10_000 {
			t.Fatal("the limiter did not leave degraded mode after the link came back")
		}
		time.Sleep(time.Millisecond) // the breaker's cooldown is on the real clock
	}
	lim.Drain(ctx) // sends the degraded spend to the counters
	for range 50 {
		check()
	}
	t.Logf("allowed %d of a quota of %d (%d of them degraded, %d degraded refusals)", allowed, limit, degraded, flaggedRejections)
	if allowed != limit {
		t.Fatalf("allowed %d across the outage, want exactly the quota %d", allowed, limit)
	}
}

// TestQuotaResetAtCalendarEdges: a spent quota is refused until its
// period's end in the plan's calendar, across daylight-saving changes and
// month lengths: RetryAfter and the quota's End are that instant, and one
// second past it the quota opens.
func TestQuotaResetAtCalendarEdges(t *testing.T) {
	cases := []struct {
		name, zone string
		anchor     int
		unit       period.Unit
		now, end   string // RFC 3339
	}{
		{"a 23-hour day (New York, spring forward)", "America/New_York", 0, period.Day, "2027-03-14T12:00:00-04:00", "2027-03-15T00:00:00-04:00"},
		{"a 25-hour day (New York, fall back)", "America/New_York", 0, period.Day, "2027-11-07T00:30:00-04:00", "2027-11-08T00:00:00-05:00"},
		{"anchor 31 in a 30-day month", "UTC", 31, period.Month, "2027-04-10T00:00:00Z", "2027-04-30T00:00:00Z"},
		{"anchor 31 in a leap February", "Europe/Paris", 31, period.Month, "2028-02-10T00:00:00+01:00", "2028-02-29T00:00:00+01:00"},
		{"anchor 29 in a common February", "UTC", 29, period.Month, "2027-02-01T00:00:00Z", "2027-02-28T00:00:00Z"},
		{"a month over a DST change (Paris, March)", "Europe/Paris", 1, period.Month, "2027-03-20T00:00:00+01:00", "2027-04-01T00:00:00+02:00"},
		{"an ISO week over a year's end", "Australia/Sydney", 0, period.Week, "2027-12-31T10:00:00+11:00", "2028-01-03T00:00:00+11:00"},
		{"an hour in a half-hour zone", "Asia/Kolkata", 0, period.Hour, "2027-06-01T10:45:00+05:30", "2027-06-01T11:00:00+05:30"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now, err1 := time.Parse(time.RFC3339, tc.now)
			end, err2 := time.Parse(time.RFC3339, tc.end)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			qs, err := region.NewQuotas([]region.Quota{{Period: tc.unit, Limit: 3}})
			if err != nil {
				t.Fatal(err)
			}
			plan := region.Plan{Rate: 1e6, Capacity: 1e6, Quotas: qs, TimeZone: tc.zone, AnchorDay: tc.anchor}
			clk := clock.NewManual(now)
			book := &bookLedger{clock: clk}
			r := newQuotaRegion(t, "eu", memstore.New(clk), plan, clk, book, 1)
			ctx := context.Background()
			var allowed int
			var last region.Decision
			for range 5 {
				d, err := r.lim.Allow(ctx, "acct", 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					allowed++
				}
				last = d
			}
			if allowed != 3 || last.Allowed || !last.QuotaRejected() {
				t.Fatalf("allowed %d of 5 with a quota of 3, last %+v", allowed, last)
			}
			// Limiter time runs a nanosecond ahead of the clock (zero means
			// never): RetryAfter is the period's end within a millisecond.
			if want := end.Sub(now); last.RetryAfter < want-time.Millisecond || last.RetryAfter > want {
				t.Fatalf("RetryAfter %v, want %v (until %v)", last.RetryAfter, want, end)
			}
			if q := last.Quotas(); len(q) != 1 || !q[0].End.Equal(end) || q[0].Remaining != 0 {
				t.Fatalf("quotas %+v, want the period ending %v spent", q, end)
			}
			clk.Set(end.Add(time.Second))
			if d, err := r.lim.Allow(ctx, "acct", 1); err != nil || !d.Allowed {
				t.Fatalf("a second into the next period: %+v %v, want allowed", d, err)
			}
		})
	}
}

// TestQuotaDropReturnsOnlyTheQuotaLease: a key whose plan loses its
// quotas gives back the quota lease it held, and no more: when the plan
// regains them in the same month, the counter still holds what was spent,
// and the month admits its limit of 10, not more.
func TestQuotaDropReturnsOnlyTheQuotaLease(t *testing.T) {
	clk := newManualClock()
	qs, err := region.NewQuotas([]region.Quota{{Period: period.Month, Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	withQuota := region.Plan{Rate: 1e6, Capacity: 1e6, Quotas: qs}
	plans := &settablePlans{p: withQuota}
	cfg := region.DefaultConfig()
	cfg.Clock = clk
	lim, err := region.New(memstore.New(clk), plans, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const key = "acct"
	admitted := 0
	check := func() {
		t.Helper()
		d, err := lim.Allow(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	// Rate leases double (1, 2, 4, 8) while the quota grants what is
	// left: after 8 checks the key holds more rate than quota permits.
	for range 8 {
		check()
	}
	plans.set(region.Plan{Rate: 1e6, Capacity: 1e6})
	lim.InvalidateAll()
	if _, err := lim.Allow(ctx, key, 1); err != nil { // drops the quota state
		t.Fatal(err)
	}
	lim.Drain(ctx)
	plans.set(withQuota)
	lim.InvalidateAll()
	for range 20 {
		check()
	}
	if admitted != 10 {
		t.Fatalf("admitted %d checks under a month quota of 10", admitted)
	}
}
