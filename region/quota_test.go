package region_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/redisstore"
	"github.com/quotaplatform/quota/region/store"
)

// bookLedger is the ledger of these tests: every usage delta the limiters
// flush, by region, read back as quota bases the way the reconciler's
// ledger answers them (ledger/quotabase: spent + charged − refunded over
// the windows that start in the period). The end-to-end path through
// JetStream and Postgres is tested in cmd/regional-limiter.
type bookLedger struct {
	clock clock.Clock
	mu    sync.Mutex
	rows  []bookRow
	asked int
}

type bookRow struct {
	region string
	u      region.Usage
}

// sink is the UsageSink of one region's limiter.
func (b *bookLedger) sink(regionName string) region.UsageSink {
	return usageFunc(func(batch []region.Usage) {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, u := range batch {
			b.rows = append(b.rows, bookRow{regionName, u})
		}
	})
}

type usageFunc func([]region.Usage)

func (f usageFunc) Record(batch []region.Usage) { f(batch) }

func (b *bookLedger) QuotaBase(_ context.Context, key string, start, end time.Time) (region.QuotaBase, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked++
	base := region.QuotaBase{ByRegion: map[string]int64{}, AsOf: b.clock.Now()}
	for _, r := range b.rows {
		if r.u.Key != key || r.u.WindowStart.Before(start) || !r.u.WindowStart.Before(end) {
			continue
		}
		net := r.u.Spent + r.u.Charged - r.u.Refunded
		base.Total += net
		base.ByRegion[r.region] += net
	}
	return base, nil
}

func (b *bookLedger) spent(key string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for _, r := range b.rows {
		if r.u.Key == key {
			n += r.u.Spent
		}
	}
	return n
}

// quotaRegion is one region of a quota test: its own store, limiter and
// share of every key.
type quotaRegion struct {
	name string
	lim  *region.Limiter
}

func newQuotaRegion(t *testing.T, name string, st store.Store, plan region.Plan, clk clock.Clock, book *bookLedger, share float64, mods ...func(*region.Config)) quotaRegion {
	t.Helper()
	cfg := region.DefaultConfig()
	cfg.Region = name
	cfg.Clock = clk
	cfg.Usage = book.sink(name)
	cfg.QuotaBases = book
	cfg.Shares = fixedShare(share)
	// About quotas, not the store's latency: on a loaded machine a Redis
	// call can pass the 5 ms default and degrade a decision.
	cfg.StoreTimeout = 2 * time.Second
	for _, mod := range mods {
		mod(&cfg)
	}
	lim, err := region.New(st, region.StaticPlans{Default: plan}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return quotaRegion{name, lim}
}

func monthPlan(t *testing.T, limit int64, zone string, anchor int) region.Plan {
	t.Helper()
	qs, err := region.NewQuotas([]region.Quota{{Period: period.Month, Limit: limit}, {Period: period.Day, Limit: 1_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	p := region.Plan{Name: "metered", Rate: 100, Capacity: 100, Quotas: qs, TimeZone: zone, AnchorDay: anchor}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQuotaMonthAcrossRegions: a month on a manual clock. A key hits its
// monthly quota mid-month in 3 regions (each with its own store, a third
// of the key's share, re-based on the ledger its flushes feed); the
// fleet admits the quota within the stated bound; the rest of the month
// every region rejects it with RetryAfter at the month's end in the
// plan's zone (anchored on the 31st: the month ends on February's last
// day); the next month opens.
func TestQuotaMonthAcrossRegions(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	const limit = 3000
	clk := clock.NewManual(time.Date(2027, 2, 10, 9, 0, 0, 0, ny))
	plan := monthPlan(t, limit, "America/New_York", 31)
	book := &bookLedger{clock: clk}
	var regions []quotaRegion
	for _, name := range []string{"eu", "us", "ap"} {
		regions = append(regions, newQuotaRegion(t, name, memstore.New(clk), plan, clk, book, 1.0/3))
	}
	ctx := context.Background()
	const key = "acct-month"
	allowed := map[string]int64{}
	var total int64
	// 10 checks per region per 100 ms (30/s each, under the 100/s rate),
	// a flush every simulated second: the report interval. A second's
	// traffic is 900 checks.
	second := func() (admitted int64) {
		for range 10 {
			for _, r := range regions {
				for range 10 {
					d, err := r.lim.Allow(ctx, key, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed[r.name]++
						total++
						admitted++
					}
				}
			}
			clk.Advance(100 * time.Millisecond)
		}
		for _, r := range regions {
			r.lim.Flush()
		}
		return admitted
	}
	for range 60 {
		second()
	}
	// A region whose base was read before the others' last spend may stop
	// short of its room until its base is older than QuotaRebase (base
	// requests run beside the checks, so which base a counter holds varies
	// from run to run): go on until a whole QuotaRebase and a second admit
	// nothing, so that the quota is spent before the rest of the month.
	rebase := region.DefaultConfig().QuotaRebase
	for quiet, extra := time.Duration(0), 0; quiet <= rebase; extra++ {
		if extra == 300 {
			t.Fatalf("still admitting 5 min after the first: %d in all", total)
		}
		if second() > 0 {
			quiet = 0
		} else {
			quiet += time.Second
		}
	}
	// One report interval's traffic is 90 (3 regions × 30/s × 1 s); 0.1 %
	// of the quota is 3: the target is the larger.
	bound := int64(90)
	t.Logf("allowed %d of a %d quota (bound %d): by region %v; %d base requests", total, limit, bound, allowed, book.asked)
	if total > limit+bound {
		t.Fatalf("the fleet admitted %d, past the quota %d by more than the bound %d", total, limit, bound)
	}
	if total < limit-bound {
		t.Fatalf("the fleet admitted %d, under the quota %d by more than %d", total, limit, bound)
	}
	for _, r := range regions {
		if allowed[r.name] < limit/3-bound {
			t.Errorf("%s admitted %d, want about a third of %d", r.name, allowed[r.name], limit)
		}
	}

	// The rest of the month: rejected everywhere, until the month's end.
	clk.Set(time.Date(2027, 2, 20, 15, 0, 0, 0, ny))
	monthEnd := time.Date(2027, 2, 28, 0, 0, 0, 0, ny) // anchor 31 in a 28-day February
	for _, r := range regions {
		for range 3 {
			d, err := r.lim.Allow(ctx, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || !d.QuotaRejected() {
				t.Fatalf("%s: %+v allowed (or not for its quota) after the quota was spent", r.name, d)
			}
			want := monthEnd.Sub(clk.Now())
			if d.RetryAfter < want-time.Second || d.RetryAfter > want+time.Second {
				t.Fatalf("%s: RetryAfter %v, want the month's end in %v", r.name, d.RetryAfter, want)
			}
			qs := d.Quotas()
			if len(qs) != 2 || qs[1].Period != period.Month || qs[1].Remaining != 0 || !qs[1].End.Equal(monthEnd) || qs[1].Limit != limit {
				t.Fatalf("%s: quotas %+v, want the month spent, ending %v", r.name, qs, monthEnd)
			}
			if d.Reset < want-time.Second || d.Remaining != 0 {
				t.Fatalf("%s: remaining %d reset %v, want the month's: 0 and %v", r.name, d.Remaining, d.Reset, want)
			}
		}
	}

	// The next month opens: [Feb 28, Mar 31) in New York.
	clk.Set(monthEnd.Add(time.Minute))
	for _, r := range regions {
		d, err := r.lim.Allow(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("%s: rejected in the new month: %+v", r.name, d)
		}
		qs := d.Quotas()
		if want := time.Date(2027, 3, 31, 0, 0, 0, 0, ny); len(qs) != 2 || !qs[1].Start.Equal(monthEnd) || !qs[1].End.Equal(want) {
			t.Fatalf("%s: quotas %+v, want the month [%v, %v)", r.name, qs, monthEnd, want)
		}
		if qs[1].Remaining <= 0 || qs[1].Remaining > limit {
			t.Fatalf("%s: month remaining %d, want in (0, %d]", r.name, qs[1].Remaining, limit)
		}
	}
}

// TestQuotaSurvivesLostStoreAndRestart: every limiter restarted and the
// region's store emptied mid-month: the quota is not reset, because the
// new counters are re-based on the ledger before they grant. On the in-process store and on a real Redis (a new key prefix
// is a Redis that lost its state).
func TestQuotaSurvivesLostStoreAndRestart(t *testing.T) {
	// Each store on a clock of its own: the limiter's and the ledger's
	// start at the store's time, mid-period in the plan's calendar.
	stores := map[string]func() (func() store.Store, *clock.Manual){}
	stores["memory"] = func() (func() store.Store, *clock.Manual) {
		clk := newManualClock()
		return func() store.Store { return memstore.New(clk) }, clk
	}
	if !testing.Short() {
		srv := testserver.StartRedis(t)
		rdb := redisClient(t, srv.Addr)
		stores["redis"] = func() (func() store.Store, *clock.Manual) {
			return func() store.Store {
				return redisstore.New(rdb, fmt.Sprintf("ql%d:", time.Now().UnixNano()))
			}, storeClock(t, rdb)
		}
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			newStore, clk := open()
			const limit, key = 1000, "acct-restart"
			zone, anchor := midPeriod(clk.Now())
			plan := monthPlan(t, limit, zone, anchor)
			plan.Rate, plan.Capacity = 1e6, 1e6 // only the quota binds (Redis refills on its own clock)
			book := &bookLedger{clock: clk}
			ctx := context.Background()
			spend := func(r quotaRegion, n int) (allowed int64) {
				for range n {
					d, err := r.lim.Allow(ctx, key, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
					clk.Advance(5 * time.Millisecond)
				}
				return allowed
			}
			first := newQuotaRegion(t, "eu", newStore(), plan, clk, book, 1)
			before := spend(first, 600)
			first.lim.Drain(ctx)
			if before != 600 || book.spent(key) != 600 {
				t.Fatalf("allowed %d, ledger %d, want 600 both", before, book.spent(key))
			}
			// A new process on an empty store.
			second := newQuotaRegion(t, "eu", newStore(), plan, clk, book, 1)
			after := spend(second, 800)
			second.lim.Drain(ctx)
			st := second.lim.Stats()
			t.Logf("allowed %d before, %d after the restart (quota %d); %d quota calls, %d base requests", before, after, limit, st.QuotaCalls, st.QuotaBaseRequests)
			// An empty counter grants nothing until it is re-based
			// (NeedBase): the quota holds exactly.
			if total := before + after; total != limit {
				t.Fatalf("admitted %d across the restart, want the quota %d exactly", total, limit)
			}
			if st.QuotaBaseRequests == 0 {
				t.Fatal("no base request: the counter was not re-based")
			}
		})
	}
}
