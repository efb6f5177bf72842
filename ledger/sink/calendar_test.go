package sink_test

import (
	"context"
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
