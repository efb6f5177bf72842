package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// sinkEventRows is every billing_sink_events row with its figures under
// the names of version v (spent and acked_spent before 022, billed and
// acked_billed from it), one string each, sorted.
func sinkEventRows(t *testing.T, conn *pgx.Conn, v int32) []string {
	t.Helper()
	billed, acked := "billed", "acked_billed"
	if v < 22 {
		billed, acked = "spent", "acked_spent"
	}
	return queryStrings(t, conn, `SELECT concat_ws('|', sink, key, period_start AT TIME ZONE 'UTC', granularity,
		revision, event_id, `+billed+`, `+acked+`, status, attempts, data::text, frame::text) FROM billing_sink_events ORDER BY 1`)
}

// auditRows is billing_sink_audit's (action, billed, acked) per row, in
// order.
func auditRows(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	return queryStrings(t, conn, `SELECT concat_ws('|', key, action, status, billed, acked) FROM billing_sink_audit ORDER BY id`)
}

// 022 renames billing_sink_events' spent and acked_spent, which hold
// billed figures, to billed and acked_billed, keeping every row; the
// audit trigger (020), whose PL/pgSQL names the columns and would fail
// only when it runs, still appends a row for each request and answer
// after 022, after going down again and after going up again.
func TestSinkBilledNamesMigration(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 21)
	if _, err := conn.Exec(ctx, `INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision,
		event_id, spent, rejected, degraded, acked_spent, data, frame, status)
		VALUES ('stripe:m', 'k1', '2026-11-01Z', 'month', '2026-12-01Z', 1, 'e1', 251, 0, 0, 200, '{"billed":251}',
		        '{"value":51}', 'pending')`); err != nil {
		t.Fatal(err)
	}
	before := sinkEventRows(t, conn, 21)

	// Each step writes through the trigger under that version's names: an
	// answer to k1's event, then a new event of another key.
	steps := []struct {
		version int32
		answer  string // k1's answer
		insert  string
	}{
		{22, `UPDATE billing_sink_events SET status = 'sent', acked_billed = billed, attempts = attempts + 1 WHERE key = 'k1'`,
			`INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision, event_id, billed,
			 rejected, degraded, acked_billed, data, status) VALUES ('stripe:m', 'k2', '2026-11-01Z', 'month', '2026-12-01Z',
			 0, 'e2', 7, 0, 0, 0, '{}', 'pending')`},
		{21, `UPDATE billing_sink_events SET status = 'failed', acked_spent = 5, attempts = attempts + 1 WHERE key = 'k1'`,
			`INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision, event_id, spent,
			 rejected, degraded, acked_spent, data, status) VALUES ('stripe:m', 'k3', '2026-11-01Z', 'month', '2026-12-01Z',
			 0, 'e3', 9, 0, 0, 0, '{}', 'pending')`},
		{22, `UPDATE billing_sink_events SET status = 'sent', acked_billed = billed, attempts = attempts + 1 WHERE key = 'k1'`,
			`INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision, event_id, billed,
			 rejected, degraded, acked_billed, data, status) VALUES ('stripe:m', 'k4', '2026-11-01Z', 'month', '2026-12-01Z',
			 0, 'e4', 11, 0, 0, 0, '{}', 'pending')`},
	}
	prev := before
	prevVersion := int32(21)
	for _, s := range steps {
		migrateTo(t, conn, s.version)
		// The rename keeps every row and figure.
		got := sinkEventRows(t, conn, s.version)
		if len(got) != len(prev) {
			t.Fatalf("%d -> %d: %d rows, want %d", prevVersion, s.version, len(got), len(prev))
		}
		for i := range got {
			if got[i] != prev[i] {
				t.Errorf("%d -> %d: row %d %q, was %q", prevVersion, s.version, i, got[i], prev[i])
			}
		}
		audited := len(auditRows(t, conn))
		if _, err := conn.Exec(ctx, s.answer); err != nil {
			t.Fatalf("version %d: answer: %v", s.version, err)
		}
		if _, err := conn.Exec(ctx, s.insert); err != nil {
			t.Fatalf("version %d: request: %v", s.version, err)
		}
		if a := auditRows(t, conn); len(a) != audited+2 {
			t.Fatalf("version %d: audit %q: want an answer and a request appended", s.version, a)
		}
		prev, prevVersion = sinkEventRows(t, conn, s.version), s.version
	}
	want := []string{
		"k1|request|pending|251|200",
		"k1|answer|sent|251|251", "k2|request|pending|7|0",
		"k1|answer|failed|251|5", "k3|request|pending|9|0",
		"k1|answer|sent|251|251", "k4|request|pending|11|0",
	}
	got := auditRows(t, conn)
	if len(got) != len(want) {
		t.Fatalf("audit %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("audit row %d %q, want %q", i, got[i], want[i])
		}
	}
	// No function names the old columns: a body that did would fail only
	// when it runs.
	var stale []string
	rows, err := conn.Query(ctx, `SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.prosrc ~ '(NEW|OLD)\.(acked_)?spent\M|acked_spent' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	if stale, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(stale) > 0 {
		t.Errorf("functions naming billing_sink_events' old columns after 022: %v (%v)", stale, err)
	}
}
