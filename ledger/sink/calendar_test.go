package sink_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
	"github.com/quotaplatform/quota/period"
)

// A sink on the plan calendar sends each key its plan's periods: a key on
// a plan in New York anchored on the 15th has a window on the 14th at
// 23:30 local and one on the 15th at 00:30 local, two plan months, sent
// as two events at the plan's local-midnight bounds; the same windows on
// the UTC calendar are one November. After the run Report and
// KeyDifferences on the plan calendar show no difference.
func TestPublisherSendsPlanPeriods(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `INSERT INTO quota_plans (name, time_zone, anchor_day, revision) VALUES ('ny15', 'America/New_York', 15, 1);
		INSERT INTO quota_key_plans (key, plan, revision) VALUES ('acct_ny', 'ny15', 2)`); err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Date(2026, 11, 14, 23, 30, 0, 0, ny) // 04:30Z on the 15th
	after := time.Date(2026, 11, 15, 0, 30, 0, 0, ny)   // 05:30Z
	e.write(t, "acct_ny", "p1", before, 7, true)
	e.write(t, "acct_ny", "p1", after, 11, true)
	cal, err := period.NewCalendar("America/New_York", 15)
	if err != nil {
		t.Fatal(err)
	}
	octStart, octEnd := cal.Bounds(period.Month, before)
	novStart, novEnd := cal.Bounds(period.Month, after)
	if !octEnd.Equal(novStart) || !novStart.Equal(time.Date(2026, 11, 15, 5, 0, 0, 0, time.UTC)) {
		t.Fatalf("plan months [%v, %v) [%v, %v): want adjacent at 2026-11-15T05:00Z", octStart, octEnd, novStart, novEnd)
	}
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	_, s, name := httpSink(t)
	if _, err := sink.NewPublisher(e.pool, e.ex, s, sink.Config{Sink: name, Calendar: "local"}); err == nil ||
		!strings.Contains(err.Error(), "Config.Calendar") {
		t.Fatalf("NewPublisher with Calendar local: %v, want an error naming Config.Calendar", err)
	}
	settled := novEnd.Add(24 * time.Hour)

	type sent struct {
		start, end time.Time
		billed     int64
	}
	for _, tt := range []struct {
		cal  export.Calendar
		want []sent
	}{
		{export.CalendarPlan, []sent{{octStart, octEnd, 7}, {novStart, novEnd, 11}}},
		{export.CalendarUTC, []sent{{nov, dec, 18}}},
	} {
		t.Run(string(tt.cal), func(t *testing.T) {
			rc, s, name := httpSink(t)
			p, err := sink.NewPublisher(e.pool, e.ex, s, sink.Config{Sink: name, Calendar: tt.cal, Metrics: e.m})
			if err != nil {
				t.Fatal(err)
			}
			st, err := p.Run(ctx, oct, dec, settled)
			if err != nil {
				t.Fatal(err)
			}
			if st.Sent != len(tt.want) || st.Difference != 0 || st.KeysDiffering != 0 {
				t.Fatalf("run: %+v, want %d sent and no difference", st, len(tt.want))
			}
			rc.mu.Lock()
			var got []sent
			for _, id := range rc.order {
				d := rc.events[id]
				if d.Key != "acct_ny" || d.Granularity != export.Month {
					t.Errorf("event %s: %+v", id, d)
				}
				got = append(got, sent{d.PeriodStart, d.PeriodEnd, d.Billed})
			}
			rc.mu.Unlock()
			if len(got) != len(tt.want) {
				t.Fatalf("sent %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if !got[i].start.Equal(tt.want[i].start) || !got[i].end.Equal(tt.want[i].end) || got[i].billed != tt.want[i].billed {
					t.Errorf("event %d: %+v, want %+v", i, got[i], tt.want[i])
				}
			}

			rows, err := sink.Report(ctx, e.pool, name, export.Month, tt.cal, oct, dec, settled)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(tt.want) {
				t.Fatalf("report: %+v, want a row per period sent", rows)
			}
			for i, r := range rows {
				if !r.PeriodStart.Equal(tt.want[i].start) || r.Closed != tt.want[i].billed || r.Difference() != 0 || r.Unacked != 0 {
					t.Errorf("report row %+v, want period %v, %d closed, acknowledged", r, tt.want[i].start, tt.want[i].billed)
				}
			}
			ds, err := sink.KeyDifferences(ctx, e.pool, name, export.Month, tt.cal, oct, dec, settled)
			if err != nil || len(ds) != 0 {
				t.Fatalf("key differences: %+v %v, want none", ds, err)
			}
		})
	}

	// SyncStripe passes its Calendar on: the two plan months are two meter
	// events, recorded at the plan's period starts.
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_ny", "cus_NY"); err != nil {
		t.Fatal(err)
	}
	fake := startFakeStripe(t)
	st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), sink.StripeConfig{Meter: "api_requests",
		Calendar: export.CalendarPlan, Metrics: e.m}, oct, dec, settled)
	if err != nil || st.Sent != 2 || st.Difference != 0 {
		t.Fatalf("stripe sync: %+v %v, want 2 sent and no difference", st, err)
	}
	if billed, _ := fake.billedBy("cus_NY"); billed != 18 {
		t.Fatalf("Stripe billed cus_NY %d, want 18", billed)
	}
	var starts []time.Time
	rows, err := e.pool.Query(ctx, `SELECT period_start FROM billing_sink_events WHERE sink = $1 ORDER BY 1`,
		sink.StripeSinkName("api_requests"))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ps time.Time
		if err := rows.Scan(&ps); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, ps)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(starts) != 2 || !starts[0].Equal(octStart) || !starts[1].Equal(novStart) {
		t.Fatalf("Stripe events recorded at %v, want %v and %v", starts, octStart, novStart)
	}
}

// A key billed on its plan's calendar (UTC months) had October and
// November, 610 units, sent; its plan then moves to one anchored on the
// 15th. The next run keeps the periods sent as they were and cuts by the
// new plan only from where they end: a stub December 1 to 15 and then
// December 15 to January 15. Stripe bills the ledger's 730 once, where
// re-cutting history sent every new-calendar period again (issue 36,
// item 2: 610 units billed as 920).
func TestPlanChangeKeepsSentPeriods(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `INSERT INTO quota_plans (name, time_zone, anchor_day, revision) VALUES ('monthly', 'UTC', 1, 1), ('mid', 'UTC', 15, 2);
		INSERT INTO quota_key_plans (key, plan, revision) VALUES ('acct_p', 'monthly', 3)`); err != nil {
		t.Fatal(err)
	}
	day := func(m time.Month, d int) time.Time { return time.Date(2026, m, d, 9, 0, 0, 0, time.UTC) }
	for _, u := range []struct {
		at    time.Time
		spent int64
	}{{day(10, 5), 100}, {day(10, 20), 200}, {day(11, 10), 150}, {day(11, 25), 160}} {
		e.write(t, "acct_p", "p1", u.at, u.spent, true)
	}
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_p", "cus_P"); err != nil {
		t.Fatal(err)
	}
	fake := startFakeStripe(t)
	cfg := sink.StripeConfig{Meter: testMeter, Calendar: export.CalendarPlan, Metrics: e.m}
	if st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, now); err != nil || st.Sent != 2 {
		t.Fatalf("run before the plan change: %+v, %v; want October and November sent", st, err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE quota_key_plans SET plan = 'mid', revision = 4 WHERE key = 'acct_p'`); err != nil {
		t.Fatal(err)
	}
	e.write(t, "acct_p", "p1", day(12, 10), 50, true)
	e.write(t, "acct_p", "p1", day(12, 20), 70, true)
	jan := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	later := time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC)
	st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, dec, jan, later)
	if err != nil || st.Sent != 2 || st.Corrections != 0 || st.Unchanged != 2 || st.KeysDiffering != 0 {
		t.Fatalf("run after the plan change: %+v, %v; want the two new periods sent, the two sent unchanged", st, err)
	}
	if billed, _ := fake.billedBy("cus_P"); billed != 730 {
		t.Fatalf("Stripe billed cus_P %d, want the ledger's 730", billed)
	}
	type period struct {
		start, end time.Time
		billed     int64
	}
	rows, err := e.pool.Query(ctx, `SELECT period_start, period_end, billed FROM billing_sink_events WHERE sink = $1 ORDER BY 1`,
		sink.StripeSinkName(testMeter))
	if err != nil {
		t.Fatal(err)
	}
	var got []period
	for rows.Next() {
		var p period
		if err := rows.Scan(&p.start, &p.end, &p.billed); err != nil {
			t.Fatal(err)
		}
		got = append(got, period{p.start.UTC(), p.end.UTC(), p.billed})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	utc := func(m time.Month, d int) time.Time { return time.Date(2026, m, d, 0, 0, 0, 0, time.UTC) }
	want := []period{{utc(10, 1), nov, 300}, {nov, dec, 310}, {dec, utc(12, 15), 50}, {utc(12, 15), jan.AddDate(0, 0, 14), 70}}
	if !slices.Equal(got, want) {
		t.Fatalf("periods recorded %+v, want %+v", got, want)
	}
	ds, err := sink.KeyDifferences(ctx, e.pool, sink.StripeSinkName(testMeter), export.Month, export.CalendarPlan,
		time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC), jan, later)
	if err != nil || len(ds) != 0 {
		t.Fatalf("key differences after the plan change: %+v, %v; want none", ds, err)
	}
}
