package migrations_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/migrations"
)

// The views speak one vocabulary: allowed (gross), charged, refunded and
// net = allowed + charged − refunded in every view that has them, and no
// column named spent. 013 renamed the spent that meant the gross cost
// allowed and kept the one that meant the net, deprecated, beside net;
// 023 removes that one, so spent means the gross allowed cost wherever it
// is left (usage_reports.spent, the limiters' reports). The key:
// allowed 247, charged 10, refunded 6, net 251. Going down to 022 gives
// back spent as net's old name, and to 012 undoes 013's renames.
func TestViewsNameTheBillingFiguresAlike(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, migrations.Latest())
	if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition('2026-11-10Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, leased,
		degraded, refunded, charged, final, seq, sent_at, first_seen, updated_at, closed_at, closed_by)
		VALUES ('acct', '2026-11-10 10:00Z', 'eu-1', '2026-11-10 10:01Z', 'eu', 247, 250, 1, 6, 10, true, 2,
		        '2026-11-10 10:01Z', '2026-11-10 10:01Z', '2026-11-10 10:01Z', '2026-11-10 10:20Z', 'reconciler')`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ view, sql string }{
		{"usage_windows", `SELECT allowed, charged, refunded, net FROM usage_windows`},
		{"usage_by_hour", `SELECT allowed, charged, refunded, net FROM usage_by_hour`},
		{"usage_by_day", `SELECT allowed, charged, refunded, net FROM usage_by_day`},
		{"usage_degraded_windows", `SELECT 247, 10, 6, net FROM usage_degraded_windows`},
		{"usage_closed_windows", `SELECT allowed, charged, refunded, allowed + charged - refunded FROM usage_closed_windows`},
		{"usage_over_authorization", `SELECT allowed, 10, 6, 251 FROM usage_over_authorization`},
	} {
		var allowed, charged, refunded, net int64
		if err := conn.QueryRow(ctx, c.sql).Scan(&allowed, &charged, &refunded, &net); err != nil {
			t.Errorf("%s: %v", c.view, err)
			continue
		}
		if allowed != 247 || charged != 10 || refunded != 6 || net != 251 {
			t.Errorf("%s: allowed %d charged %d refunded %d net %d, want 247 10 6 251", c.view, allowed, charged, refunded, net)
		}
	}
	viewsWithSpent := func() []string {
		t.Helper()
		return queryStrings(t, conn, `SELECT c.relname || '.' || a.attname FROM pg_attribute a
			JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind IN ('v', 'm') AND a.attnum > 0 AND NOT a.attisdropped
			  AND (a.attname = 'spent' OR a.attname LIKE '%\_spent' OR a.attname LIKE 'spent\_%') ORDER BY 1`)
	}
	for _, col := range viewsWithSpent() {
		t.Errorf("view column %s: spent is gone from the views (read net for what is billed, allowed for the gross)", col)
	}

	// 023's down part: spent is back where 013 left it, net's old name.
	migrateTo(t, conn, 22)
	want := []string{"usage_by_day.spent", "usage_by_hour.spent", "usage_degraded_windows.spent", "usage_windows.spent"}
	if got := viewsWithSpent(); !slices.Equal(got, want) {
		t.Errorf("down to 22: views with spent %v, want %v", got, want)
	}
	for _, v := range want {
		view, _, _ := strings.Cut(v, ".")
		var spent, net int64
		if err := conn.QueryRow(ctx, `SELECT spent, net FROM `+view).Scan(&spent, &net); err != nil || spent != 251 || net != 251 {
			t.Errorf("down to 22: %s spent %d net %d (%v), want 251 each", view, spent, net, err)
		}
	}

	migrateTo(t, conn, 12)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT spent FROM usage_over_authorization`).Scan(&n); err != nil || n != 247 {
		t.Fatalf("down to 12: usage_over_authorization.spent %d, %v", n, err)
	}
}

// In the ledger's tables spent means one thing: the gross allowed cost of
// a report (usage_reports.spent, which the views name allowed). The test
// writes the key (allowed 247, charged 10, refunded 6, so net and
// billed 251) into the ledger and sends its period to a sink
// (billing_sink_events, its figures given under each name the table has
// had), then reads every table column named spent or *_spent: each must
// hold 247. billing_sink_events.spent and acked_spent, which held the
// billed figure until 022 renamed them, fail it.
func TestTablesSpentIsTheGrossAllowed(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, migrations.Latest())
	if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition('2026-11-10Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, leased,
		refunded, charged, final, seq, sent_at)
		VALUES ('acct', '2026-11-10 10:00Z', 'eu-1', '2026-11-10 10:01Z', 'eu', 247, 250, 6, 10, true, 1, '2026-11-10 10:01Z')`); err != nil {
		t.Fatal(err)
	}
	// The sink's row, by whatever names the table has: jsonb_populate_record
	// takes the keys that are columns.
	if _, err := conn.Exec(ctx, `INSERT INTO billing_sink_events SELECT * FROM jsonb_populate_record(NULL::billing_sink_events,
		'{"sink": "stripe:m", "key": "acct", "period_start": "2026-11-01T00:00:00Z", "granularity": "month",
		  "period_end": "2026-12-01T00:00:00Z", "revision": 0, "event_id": "e1", "rejected": 0, "degraded": 0,
		  "billed": 251, "acked_billed": 251, "spent": 251, "acked_spent": 251,
		  "data": {"allowed": 247, "charged": 10, "refunded": 6, "net": 251, "billed": 251}, "status": "sent",
		  "attempts": 1, "updated_at": "2026-12-01T00:05:00Z", "maybe_stored": false}')`); err != nil {
		t.Fatal(err)
	}
	seeded := map[string]bool{"usage_reports": true, "billing_sink_events": true}
	rows, err := conn.Query(ctx, `SELECT c.relname::text, a.attname::text FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND a.attnum > 0
		  AND NOT a.attisdropped AND (a.attname = 'spent' OR a.attname LIKE '%\_spent') ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	columns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Table, Column string }])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range columns {
		if !seeded[c.Table] {
			t.Errorf("%s.%s: a table this test writes nothing to names spent; say what it holds (allowed, billed, net)", c.Table, c.Column)
			continue
		}
		var got []int64
		if err := conn.QueryRow(ctx, `SELECT array_agg(DISTINCT `+c.Column+`::bigint) FROM `+c.Table+` WHERE key = 'acct'`).
			Scan(&got); err != nil {
			t.Fatalf("%s.%s: %v", c.Table, c.Column, err)
		}
		if len(got) != 1 || got[0] != 247 {
			t.Errorf("%s.%s holds %v for the key: spent in a table is the gross allowed cost (247), not billed or net (251)",
				c.Table, c.Column, got)
		}
	}
}
