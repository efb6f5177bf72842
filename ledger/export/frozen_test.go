package export_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger/export"
)

// A sink's recorded periods keep their bounds (Query.Frozen): a key now
// on New York days had two UTC days sent; its windows inside them are
// summed into them, even those of a New York day that straddles their
// end, and the New York calendar cuts only what follows, its first day
// clipped to start where the last sent one ends. Another sink, or none,
// sees plain New York days; hours and months are cut the same way.
func TestExportFrozenPeriods(t *testing.T) {
	_, pool := ledgertest.Database(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO quota_plans (name, time_zone, anchor_day, revision) VALUES ('nyz', 'America/New_York', 1, 1);
		INSERT INTO quota_key_plans (key, plan, revision) VALUES ('acct_z', 'nyz', 2)`); err != nil {
		t.Fatal(err)
	}
	z := func(d, h int) time.Time { return time.Date(2026, 11, d, h, 0, 0, 0, time.UTC) }
	writeWindows(t, pool, []planWindow{
		{key: "acct_z", at: z(10, 3), spent: 1, final: true},  // NY Nov 9 22:00, in the sent UTC Nov 10
		{key: "acct_z", at: z(10, 23), spent: 2, final: true}, // NY Nov 10 18:00, in it too
		{key: "acct_z", at: z(11, 2), spent: 4, final: true},  // NY Nov 10 21:00, after it
		{key: "acct_z", at: z(11, 6), spent: 8, final: true},  // NY Nov 11 01:00
	})
	for _, g := range []string{"day", "hour"} {
		if _, err := pool.Exec(ctx, `INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision, event_id,
		    billed, rejected, degraded, data, status) VALUES ('s1', 'acct_z', $1, $3, $2, 0, 'e', 3, 0, 0, '{}', 'sent')`,
			z(10, 0), z(11, 0), g); err != nil {
			t.Fatal(err)
		}
	}
	ex, err := export.New(pool, export.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		start, end time.Time
		billed     int64
	}
	for _, tt := range []struct {
		name   string
		g      export.Granularity
		frozen string
		want   []row
	}{
		{"days, frozen", export.Day, "s1", []row{{z(10, 0), z(11, 0), 3}, {z(11, 0), z(11, 5), 4}, {z(11, 5), z(12, 5), 8}}},
		{"days, another sink", export.Day, "s2", []row{{z(9, 5), z(10, 5), 1}, {z(10, 5), z(11, 5), 6}, {z(11, 5), z(12, 5), 8}}},
		{"days, none", export.Day, "", []row{{z(9, 5), z(10, 5), 1}, {z(10, 5), z(11, 5), 6}, {z(11, 5), z(12, 5), 8}}},
		{"hours, frozen", export.Hour, "s1", []row{{z(10, 0), z(11, 0), 3}, {z(11, 2), z(11, 3), 4}, {z(11, 6), z(11, 7), 8}}},
		{"months, none frozen", export.Month, "s1", []row{{z(1, 4), time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC), 15}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := export.Query{From: z(1, 0), To: z(20, 0), Granularity: tt.g, Calendar: export.CalendarPlan, Now: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC),
				Frozen: tt.frozen}
			var got []row
			for _, r := range exportAll(t, ex, q) {
				if !r.Complete {
					t.Errorf("row %+v not complete", r)
				}
				got = append(got, row{r.PeriodStart, r.PeriodEnd, r.Billed})
			}
			if len(got) != len(tt.want) {
				t.Fatalf("rows %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if !got[i].start.Equal(tt.want[i].start) || !got[i].end.Equal(tt.want[i].end) || got[i].billed != tt.want[i].billed {
					t.Errorf("row %d: %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
