package migrations_test

import (
	"context"
	"testing"
)

// 013 gives the views one vocabulary: allowed (gross), charged, refunded
// and net = allowed + charged − refunded in every view that has them, and
// no spent that means the gross cost. The key: allowed 247,
// charged 10, refunded 6, net 251. Going down undoes the renames.
func TestViewsNameTheBillingFiguresAlike(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 13)
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
	// Where spent is left (deprecated), it is the net; nowhere is it the
	// gross cost.
	rows, err := conn.Query(ctx, `SELECT c.relname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relkind = 'v' AND c.relname LIKE 'usage%' AND a.attname = 'spent' AND NOT a.attisdropped ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var withSpent []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		withSpent = append(withSpent, v)
	}
	rows.Close()
	for _, v := range withSpent {
		var spent, net int64
		if err := conn.QueryRow(ctx, `SELECT spent, net FROM `+v).Scan(&spent, &net); err != nil || spent != net {
			t.Errorf("%s: spent %d net %d (%v): spent must be net's old name", v, spent, net, err)
		}
	}

	migrateTo(t, conn, 12)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT spent FROM usage_over_authorization`).Scan(&n); err != nil || n != 247 {
		t.Fatalf("down to 12: usage_over_authorization.spent %d, %v", n, err)
	}
}
