package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger/reconcile"
)

// Issue 37, item 4: a row whose window_end is 9999-01-01 and that never
// sent its final report was never "incomplete" in the views, so nothing
// said why its key's periods stayed open. 018 judges by the window's age:
// a window counts as ended at most usage_max_window() (reconcile.MaxWindow)
// after its start. Ingestion refuses such a window now (long_window), so
// the row is written directly, as one from before that bound. Times are
// relative to Postgres's now(), as the views' are.
func TestIncompleteByWindowAge(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 18)

	var maxWindow time.Duration
	if err := conn.QueryRow(ctx, `SELECT usage_max_window()`).Scan(&maxWindow); err != nil || maxWindow != reconcile.MaxWindow {
		t.Fatalf("usage_max_window() %v (%v), want reconcile.MaxWindow %v", maxWindow, err, reconcile.MaxWindow)
	}

	rows := []struct {
		key         string
		started     string // before now()
		windowEnd   string // '' is a minute after the start
		final       bool
		incomplete  bool // at 18
		incomplete0 bool // at 17: by window_end alone
	}{
		{"open-forever-old", "25 hours", "9999-01-01Z", false, true, false},
		{"open-forever-fresh", "10 minutes", "9999-01-01Z", false, false, false},
		{"minute-overdue", "10 minutes", "", false, true, true},
		{"minute-in-grace", "2 minutes", "", false, false, false},
		{"final-forever-old", "25 hours", "9999-01-01Z", true, false, false},
	}
	if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition(now() - interval '25 hours'), usage_ensure_partition(now())`); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, final, seq, sent_at)
			SELECT $1, s, 'us-1', coalesce(nullif($3, '')::timestamptz, s + interval '1 minute'), 'us', 5, $4, 1, s
			FROM (SELECT date_trunc('minute', now() - $2::interval) AS s) w`, r.key, r.started, r.windowEnd, r.final); err != nil {
			t.Fatal(err)
		}
	}
	check := func(version int32) {
		t.Helper()
		for _, r := range rows {
			want := r.incomplete
			if version == 17 {
				want = r.incomplete0
			}
			var incomplete, listed bool
			if err := conn.QueryRow(ctx, `SELECT w.incomplete, EXISTS (SELECT 1 FROM usage_incomplete_windows i WHERE i.key = w.key)
				FROM usage_windows w WHERE w.key = $1`, r.key).Scan(&incomplete, &listed); err != nil {
				t.Fatal(err)
			}
			if incomplete != want || listed != want {
				t.Errorf("at %d, %s: usage_windows.incomplete %v, in usage_incomplete_windows %v; want %v", version, r.key, incomplete, listed, want)
			}
			var hourly, daily bool
			if err := conn.QueryRow(ctx, `SELECT (SELECT bool_or(incomplete) FROM usage_by_hour WHERE key = $1),
				(SELECT bool_or(incomplete) FROM usage_by_day WHERE key = $1)`, r.key).Scan(&hourly, &daily); err != nil {
				t.Fatal(err)
			}
			if hourly != want || daily != want {
				t.Errorf("at %d, %s: usage_by_hour.incomplete %v, usage_by_day.incomplete %v; want %v", version, r.key, hourly, daily, want)
			}
		}
	}
	check(18)
	migrateTo(t, conn, 17)
	check(17) // the old views: the open-for-ever row is never overdue
	migrateTo(t, conn, 18)
	check(18)
}
