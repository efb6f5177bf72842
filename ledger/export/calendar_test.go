package export_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/period"
)

// planWindow is one window of a key: its start and what it recorded.
type planWindow struct {
	key                      string
	at                       time.Time
	spent, refunded, charged int64
	final                    bool
}

// planKeys are the keys of the plan-calendar tests and the calendar each
// must be cut on: acct_ny's plan is America/New_York anchored on the 15th,
// acct_kol's Asia/Kolkata (+5:30) from the 1st, acct_dflt has no
// assignment and takes the plan "default" (Europe/Paris, the 31st),
// acct_lost is assigned a plan the mirror does not have (UTC).
var planKeys = map[string]period.Calendar{
	"acct_dflt": mustCalendar("Europe/Paris", 31),
	"acct_kol":  mustCalendar("Asia/Kolkata", 1),
	"acct_lost": {},
	"acct_ny":   mustCalendar("America/New_York", 15),
}

func mustCalendar(zone string, anchor int) period.Calendar {
	c, err := period.NewCalendar(zone, anchor)
	if err != nil {
		panic(err)
	}
	return c
}

// seedPlans mirrors the plans of planKeys into migration 008's tables, as
// ledger/planmirror writes them.
func seedPlans(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	for _, stmt := range []string{
		`INSERT INTO quota_plans (name, quotas, time_zone, anchor_day, revision) VALUES
		    ('ny15', '[{"period":"month","limit":1000}]', 'America/New_York', 15, 1),
		    ('kol', '[]', 'Asia/Kolkata', 1, 2),
		    ('default', '[]', 'Europe/Paris', 31, 3),
		    ('gone', '[]', 'Pacific/Chatham', 7, 4)`,
		`UPDATE quota_plans SET deleted = true WHERE name = 'gone'`,
		`INSERT INTO quota_key_plans (key, plan, revision) VALUES
		    ('acct_ny', 'ny15', 5), ('acct_kol', 'kol', 6), ('acct_lost', 'gone', 7)`,
	} {
		if _, err := pool.Exec(context.Background(), stmt); err != nil {
			t.Fatal(err)
		}
	}
}

// planWindows are windows near the keys' period boundaries: acct_ny's
// local month boundary on the 15th (the 14th at 23:30 local is still the
// month before), the end of daylight-saving time on 2026-11-01 (01:30
// happens twice: two hours, one 25-hour day), acct_kol's local midnight
// at 18:30 UTC and its half-hour clock hours, acct_dflt's months from the
// 31st (the 30th in November), and refunds larger than a period's spend,
// carried across plan periods.
func planWindows() []planWindow {
	ny := func(s string) time.Time { return localTime(s, "America/New_York") }
	kol := func(s string) time.Time { return localTime(s, "Asia/Kolkata") }
	paris := func(s string) time.Time { return localTime(s, "Europe/Paris") }
	return []planWindow{
		{"acct_ny", ny("2026-09-20 12:00"), 4, 0, 0, true},
		{"acct_ny", ny("2026-10-14 23:30"), 10, 0, 0, true},
		{"acct_ny", ny("2026-10-15 00:30"), 3, 0, 0, true},
		{"acct_ny", time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), 1, 0, 0, true}, // 01:30 EDT
		{"acct_ny", time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC), 2, 0, 0, true}, // 01:30 EST
		{"acct_ny", ny("2026-11-01 23:30"), 5, 0, 0, true},
		{"acct_ny", ny("2026-11-14 23:30"), 7, 0, 0, true},
		{"acct_ny", ny("2026-11-15 00:00"), 5, 30, 0, true},
		{"acct_ny", ny("2026-11-20 09:00"), 4, 0, 2, true},
		{"acct_ny", ny("2026-12-14 23:59"), 6, 0, 0, true},
		{"acct_ny", ny("2026-12-15 00:01"), 40, 0, 0, false},
		{"acct_kol", time.Date(2026, 10, 31, 18, 29, 0, 0, time.UTC), 8, 0, 0, true},  // 23:59 IST
		{"acct_kol", time.Date(2026, 10, 31, 18, 31, 0, 0, time.UTC), 9, 12, 0, true}, // 00:01 IST
		{"acct_kol", kol("2026-11-30 23:45"), 20, 0, 0, true},
		{"acct_kol", kol("2026-12-01 00:15"), 1, 0, 0, true},
		{"acct_dflt", paris("2026-10-30 23:50"), 3, 0, 0, true},
		{"acct_dflt", paris("2026-10-31 00:10"), 4, 9, 0, true},
		{"acct_dflt", paris("2026-11-29 23:59"), 5, 0, 0, true},
		{"acct_dflt", paris("2026-11-30 00:00"), 6, 0, 0, true},
		{"acct_lost", time.Date(2026, 10, 31, 23, 59, 0, 0, time.UTC), 2, 0, 0, true},
		{"acct_lost", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), 3, 0, 0, true},
	}
}

func localTime(s, zone string) time.Time {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		panic(err)
	}
	t, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		panic(err)
	}
	return t
}

func writeWindows(t testing.TB, pool *pgxpool.Pool, ws []planWindow) {
	t.Helper()
	var reps []ledger.Report
	for _, w := range ws {
		reps = append(reps, ledger.Report{Key: w.key, WindowStart: w.at, WindowEnd: w.at.Add(time.Minute), ProcessID: "p1",
			Region: "eu", Spent: w.spent, Refunded: w.refunded, Charged: w.charged, Final: w.final, Seq: 1, SentAt: w.at})
	}
	if _, err := reconcile.NewWriter(pool).Write(context.Background(), reps); err != nil {
		t.Fatal(err)
	}
}

// wantPlanRows is the export computed in Go from ws: each window in its
// key's period as period.Calendar.Bounds cuts it, the periods summed and
// carried in order (export.Carry, credit up to what was billed before)
// over the key's whole history, then the
// rows whose period starts in [from, to).
func wantPlanRows(ws []planWindow, g export.Granularity, from, to, now time.Time) []export.Row {
	unit := map[export.Granularity]period.Unit{export.Hour: period.Hour, export.Day: period.Day, export.Month: period.Month}[g]
	type pk struct {
		key   string
		start int64
	}
	rows := map[pk]*export.Row{}
	finals := map[pk]bool{}
	for _, w := range ws {
		start, end := planKeys[w.key].Bounds(unit, w.at)
		k := pk{w.key, start.UnixNano()}
		r := rows[k]
		if r == nil {
			r = &export.Row{Key: w.key, PeriodStart: start.UTC(), PeriodEnd: end.UTC()}
			rows[k] = r
			finals[k] = true
		}
		r.Allowed += w.spent
		r.Refunded += w.refunded
		r.Charged += w.charged
		r.Windows++
		finals[k] = finals[k] && w.final
	}
	var all []export.Row
	for k, r := range rows {
		r.Net = r.Allowed + r.Charged - r.Refunded
		r.Complete = finals[k] && !r.PeriodEnd.After(now)
		all = append(all, *r)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Key != all[j].Key {
			return all[i].Key < all[j].Key
		}
		return all[i].PeriodStart.Before(all[j].PeriodStart)
	})
	var out []export.Row
	var billedBefore, netBefore, uncreditedBefore int64
	for i := range all {
		if i > 0 && all[i-1].Key == all[i].Key {
			all[i].CarriedIn = all[i-1].CarriedOut
		} else {
			billedBefore, netBefore, uncreditedBefore = 0, 0, 0
		}
		// The state a sink stores (Row.Before), by this model's sums:
		// the lowest point is what went uncredited so far, negated.
		all[i].Before = export.Carried{CumNet: netBefore, Low: -uncreditedBefore, CumBilled: billedBefore, Exact: true}
		// Credit up to what was billed before: the key's net so far, less
		// its credit, floored at zero.
		if sofar := billedBefore - all[i].CarriedIn + all[i].Net; sofar < 0 {
			all[i].Uncredited = -sofar
		}
		all[i].Billed, all[i].CarriedOut = export.Carry(all[i].CarriedIn, all[i].Net+all[i].Uncredited)
		billedBefore += all[i].Billed
		netBefore += all[i].Net
		uncreditedBefore += all[i].Uncredited
		if !all[i].PeriodStart.Before(from) && all[i].PeriodStart.Before(to) {
			out = append(out, all[i])
		}
	}
	return out
}

func exportAll(t testing.TB, ex *export.Exporter, q export.Query) []export.Row {
	t.Helper()
	var out []export.Row
	if err := ex.Export(context.Background(), q, func(rows []export.Row) error {
		out = append(out, rows...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func rowLines(rows []export.Row) string {
	var s string
	for _, r := range rows {
		s += fmt.Sprintf("  %s [%s, %s) spent %d refunded %d charged %d net %d in %d billed %d out %d uncredited %d windows %d complete %v\n",
			r.Key, r.PeriodStart.Format(time.RFC3339), r.PeriodEnd.Format(time.RFC3339), r.Allowed, r.Refunded, r.Charged,
			r.Net, r.CarriedIn, r.Billed, r.CarriedOut, r.Uncredited, r.Windows, r.Complete)
	}
	return s
}

// On the plan calendar each key's hours, days and months are cut exactly
// where period.Calendar cuts them for its plan (hence quota_period_bounds,
// TestPeriodBoundsMatchGo), with the carry-over exact over each key's own
// periods: the export equals a Go computation of the same ledger, for
// every granularity, ranges that cut through a key's history, and pages
// of one row (every page boundary, pages with no row).
func TestExportPlanCalendarMatchesGo(t *testing.T) {
	_, pool := ledgertest.Database(t)
	seedPlans(t, pool)
	ws := planWindows()
	writeWindows(t, pool, ws)
	now := time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC)
	utc := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	ranges := []struct {
		g        export.Granularity
		from, to time.Time
	}{
		{export.Month, utc("2026-09-01T00:00:00Z"), utc("2027-01-01T00:00:00Z")},
		{export.Month, utc("2026-10-15T04:00:00Z"), utc("2026-11-15T05:00:00Z")}, // acct_ny's October period only
		{export.Month, utc("2026-11-01T00:00:00Z"), utc("2026-12-01T00:00:00Z")},
		{export.Day, utc("2026-09-01T00:00:00Z"), utc("2027-01-01T00:00:00Z")},
		{export.Day, utc("2026-10-31T12:00:00Z"), utc("2026-11-02T12:00:00Z")},
		{export.Hour, utc("2026-10-01T00:00:00Z"), utc("2026-10-31T00:00:00Z")},
		{export.Hour, utc("2026-10-31T00:00:00Z"), utc("2026-11-30T00:00:00Z")},
		{export.Hour, utc("2026-11-29T20:00:00Z"), utc("2026-12-29T00:00:00Z")},
	}
	for _, pageRows := range []int{1, 3, 10_000} {
		cfg := export.DefaultConfig()
		cfg.PageRows = pageRows
		ex, err := export.New(pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range ranges {
			t.Run(fmt.Sprintf("%s [%s, %s) pages of %d", r.g, r.from.Format(time.RFC3339), r.to.Format(time.RFC3339), pageRows), func(t *testing.T) {
				got := exportAll(t, ex, export.Query{From: r.from, To: r.to, Granularity: r.g, Calendar: export.CalendarPlan, Now: now})
				want := wantPlanRows(ws, r.g, r.from, r.to, now)
				if len(want) == 0 {
					t.Fatal("the range holds no period: a useless case")
				}
				if !slices.Equal(got, want) {
					t.Fatalf("export\n%swant (period.Calendar)\n%s", rowLines(got), rowLines(want))
				}
				// Query.Keys reads those keys' rows alone, on either
				// calendar (UTC where the range is UTC periods').
				for _, cal := range []export.Calendar{export.CalendarPlan, export.CalendarUTC} {
					q := export.Query{From: r.from, To: r.to, Granularity: r.g, Calendar: cal, Now: now}
					if q.Validate() != nil {
						continue
					}
					all := exportAll(t, ex, q)
					keys := []string{"acct_unknown", all[len(all)-1].Key, all[0].Key, all[len(all)-1].Key}
					q.Keys = keys
					only := exportAll(t, ex, q)
					var wantOnly []export.Row
					for _, row := range all {
						if slices.Contains(keys, row.Key) {
							wantOnly = append(wantOnly, row)
						}
					}
					if len(wantOnly) == 0 || !slices.Equal(only, wantOnly) {
						t.Fatalf("%s calendar, keys %v:\n%swant\n%s", cal, keys, rowLines(only), rowLines(wantOnly))
					}
				}
				// Resuming from any row's cursor gives the rows after it.
				for i := range got {
					rest := exportAll(t, ex, export.Query{From: r.from, To: r.to, Granularity: r.g, Calendar: export.CalendarPlan,
						Now: now, Cursor: got[i].Cursor()})
					if !slices.Equal(rest, got[i+1:]) {
						t.Fatalf("after row %d: %d rows, want %d", i, len(rest), len(got)-i-1)
					}
				}
			})
		}
	}
}

// The scenario of issue 27: a key whose plan is America/New_York anchored
// on the 15th has its window of the 14th at 23:30 local (04:30 UTC on the
// 15th) in the period that ends at the 15th's local midnight, not in the
// UTC month that holds it; and its refund larger than the next period's
// spend is carried into the period after, on the plan's periods. Over
// HTTP, calendar=plan.
func TestExportPlanMonthOverHTTP(t *testing.T) {
	url, pool := ledgertest.Database(t)
	seedPlans(t, pool)
	writeWindows(t, pool, planWindows())
	srv := serve(t, url, export.DefaultConfig())
	srv.Config.Handler.(*export.Handler).Now = func() time.Time { return time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC) }
	rows := readNDJSON(t, get(t, srv, tokAll, "from=2026-10&to=2027-01&granularity=month&calendar=plan", ""))
	type nyRow struct {
		start, end                  string
		spent, net, in, billed, out int64
	}
	var got []nyRow
	for _, r := range rows {
		if r.Key == "acct_ny" {
			got = append(got, nyRow{r.PeriodStart.Format(time.RFC3339), r.PeriodEnd.Format(time.RFC3339),
				r.Allowed, r.Net, r.CarriedIn, r.Billed, r.CarriedOut})
		}
	}
	want := []nyRow{
		// Oct 15 00:00 EDT to Nov 15 00:00 EST: the window of Oct 14 23:30
		// is September's, Nov 14 23:30 (04:30 UTC on the 15th) is here.
		{"2026-10-15T04:00:00Z", "2026-11-15T05:00:00Z", 3 + 1 + 2 + 5 + 7, 18, 0, 18, 0},
		// Nov 15 00:00 local: 30 refunded against 11 spent and 2 charged.
		{"2026-11-15T05:00:00Z", "2026-12-15T05:00:00Z", 5 + 4 + 6, 15 + 2 - 30, 0, 0, 13},
		{"2026-12-15T05:00:00Z", "2027-01-15T05:00:00Z", 40, 40, 13, 27, 0},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("acct_ny's months\n%+v\nwant\n%+v", got, want)
	}
	for _, r := range rows {
		if r.Granularity != "month" {
			t.Fatalf("row %+v: granularity %q", r, r.Granularity)
		}
	}
}

// Plan-calendar queries are refused with the field named: to not after
// from, a span past the granularity's bound, an unknown calendar.
func TestExportPlanCalendarRefusals(t *testing.T) {
	url, _ := ledgertest.Database(t)
	srv := serve(t, url, export.DefaultConfig())
	for _, tt := range []struct{ name, query, field string }{
		{"unknown calendar", "from=2026-11&to=2026-12&calendar=local", "calendar"},
		{"to before from", "from=2026-11-02T10:00:00Z&to=2026-11-02T09:00:00Z&calendar=plan", "to"},
		{"to equal to from", "from=2026-11-02T10:00:00Z&to=2026-11-02T10:00:00Z&calendar=plan", "to"},
		{"no from", "to=2026-12&calendar=plan", "from"},
		{"no to", "from=2026-12&calendar=plan", "to"},
		{"more than 744 hours", "from=2026-11-01T00:30:00Z&to=2026-12-02T00:30:01Z&granularity=hour&calendar=plan", "to"},
		{"more than 366 days", "from=2026-01-01T07:00:00Z&to=2027-01-02T07:00:01Z&granularity=day&calendar=plan", "to"},
		{"more than 366 months", "from=2026-01&to=2056-07-01T00:00:01Z&calendar=plan", "to"},
		{"744 hours, bad format", "from=2026-11-01T00:30:00Z&to=2026-12-02T00:30:00Z&granularity=hour&calendar=plan&format=x", "format"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := get(t, srv, tokAll, tt.query, "")
			var body map[string]string
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != 400 || body["field"] != tt.field || body["error"] == "" {
				t.Fatalf("%d %v, want 400 naming %q", resp.StatusCode, body, tt.field)
			}
		})
	}
}

// KeyPeriod gives the bounds of the row that holds an instant: on the
// plan calendar the key's plan's period (period.Calendar), on UTC the UTC
// period; a bad argument names its field.
func TestKeyPeriod(t *testing.T) {
	_, pool := ledgertest.Database(t)
	seedPlans(t, pool)
	ex, err := export.New(pool, export.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	units := map[export.Granularity]period.Unit{export.Hour: period.Hour, export.Day: period.Day, export.Month: period.Month}
	for _, w := range planWindows() {
		for g, u := range units {
			start, end, err := ex.KeyPeriod(ctx, w.key, g, export.CalendarPlan, w.at)
			ws, we := planKeys[w.key].Bounds(u, w.at)
			if err != nil || !start.Equal(ws) || !end.Equal(we) {
				t.Fatalf("%s %s at %s: [%s, %s) %v, want [%s, %s)", w.key, g, w.at.UTC().Format(time.RFC3339),
					start.Format(time.RFC3339), end.Format(time.RFC3339), err, ws.UTC().Format(time.RFC3339), we.UTC().Format(time.RFC3339))
			}
			us, ue, err := ex.KeyPeriod(ctx, w.key, g, "", w.at)
			if err != nil || !us.Equal(g.Start(w.at)) || !ue.Equal(g.Next(us)) {
				t.Fatalf("%s %s at %s on UTC: [%s, %s) %v", w.key, g, w.at, us, ue, err)
			}
		}
	}
	for _, tt := range []struct {
		key   string
		g     export.Granularity
		cal   export.Calendar
		at    time.Time
		field string
	}{
		{"", export.Month, export.CalendarPlan, now, "key"},
		{"k", "week", export.CalendarPlan, now, "granularity"},
		{"k", export.Month, "local", now, "calendar"},
		{"k", export.Month, export.CalendarPlan, time.Time{}, "at"},
	} {
		_, _, err := ex.KeyPeriod(ctx, tt.key, tt.g, tt.cal, tt.at)
		var fe *export.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("KeyPeriod(%q, %q, %q, %v): %v, want a FieldError naming %s", tt.key, tt.g, tt.cal, tt.at, err, tt.field)
		}
	}
}
