package migrations_test

import (
	"context"
	"testing"
)

// 017 stamps each usage_reports row with the transaction that last wrote
// it, on insert and on every update (the reconciler's upsert, the
// closer), leaves rows from before it NULL, and round-trips: down to 16
// and up again keeps the ledger's rows and stamps again.
func TestSinkCheckpointsStampWrites(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 16)
	if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition('2026-11-10Z');
		INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, seq, sent_at)
		VALUES ('old', '2026-11-10 10:00Z', 'p', '2026-11-10 10:01Z', 'eu', 1, 1, '2026-11-10 10:01Z')`); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		migrateTo(t, conn, 17)
		var xid, old string
		var oldNull bool
		if err := conn.QueryRow(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, seq, sent_at)
			VALUES ('new', '2026-11-10 10:00Z', 'p', '2026-11-10 10:01Z', 'eu', 1, 1, '2026-11-10 10:01Z')
			RETURNING changed_xid::text, pg_current_xact_id()::text`).Scan(&old, &xid); err != nil {
			t.Fatal(err)
		}
		if old != xid {
			t.Fatalf("round %d: inserted row stamped %s by transaction %s", round, old, xid)
		}
		if err := conn.QueryRow(ctx, `SELECT changed_xid IS NULL FROM usage_reports WHERE key = 'old'`).Scan(&oldNull); err != nil || !oldNull {
			t.Fatalf("round %d: a row from before 017 stamped (null %v, %v)", round, oldNull, err)
		}
		if err := conn.QueryRow(ctx, `UPDATE usage_reports SET final = true WHERE key = 'old'
			RETURNING changed_xid::text, pg_current_xact_id()::text`).Scan(&old, &xid); err != nil || old != xid {
			t.Fatalf("round %d: updated row stamped %s by transaction %s (%v)", round, old, xid, err)
		}
		var revisits bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass('billing_sink_revisits') IS NOT NULL`).Scan(&revisits); err != nil || !revisits {
			t.Fatalf("round %d: billing_sink_revisits missing (%v)", round, err)
		}
		migrateTo(t, conn, 16)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM usage_reports`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("round %d: %d rows after going down, want 2 (%v)", round, n, err)
		}
		if _, err := conn.Exec(ctx, `DELETE FROM usage_reports WHERE key = 'new'; UPDATE usage_reports SET final = false`); err != nil {
			t.Fatal(err)
		}
	}
}
