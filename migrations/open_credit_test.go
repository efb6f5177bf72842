package migrations_test

import (
	"context"
	"testing"
)

// 018: retention's open credit follows the export's rule, credit never
// more than the key was billed before. A forged refund of the largest
// counter (a row from before the reconciler cut refunds to their row's
// spend) held its month attached for ever with a credit of 9·10^15; now
// it opens the 40 billed before it. Going down restores 011's figure.
func TestOpenCreditAtMostBilled(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 18)
	if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition('2026-10-10Z');
		INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, refunded, final, seq, sent_at) VALUES
		    ('acct', '2026-10-10 10:00Z', 'eu-1', '2026-10-10 10:01Z', 'eu', 40, 0, true, 1, '2026-10-10 10:01Z'),
		    ('acct', '2026-10-10 11:00Z', 'us-1', '2026-10-10 11:01Z', 'us', 0, 9007199254740991, true, 1, '2026-10-10 11:01Z'),
		    ('first', '2026-10-10 10:00Z', 'eu-1', '2026-10-10 10:01Z', 'eu', 6, 8, true, 1, '2026-10-10 10:01Z')`); err != nil {
		t.Fatal(err)
	}
	credit := func() map[string]string {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT key, credit::text FROM usage_open_credit('2026-11-01Z')`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var k, c string
			if err := rows.Scan(&k, &c); err != nil {
				t.Fatal(err)
			}
			out[k] = c
		}
		return out
	}
	if got := credit(); len(got) != 1 || got["acct"] != "40" {
		t.Fatalf("open credit %v, want acct 40 only", got)
	}
	migrateTo(t, conn, 17)
	if got := credit(); got["acct"] != "9007199254740991" || got["first"] != "2" {
		t.Fatalf("at 17, open credit %v, want 011's unbounded figures", got)
	}
}
