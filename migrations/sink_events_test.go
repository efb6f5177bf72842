package migrations_test

import (
	"context"
	"testing"
)

// 004 creates billing_sink_events, whose checks refuse an unknown status
// or granularity, and its down part drops it.
func TestSinkEventsMigration(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 4) // 022 renames spent
	insert := `INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision, event_id,
		spent, rejected, degraded, data, status) VALUES ('s', 'k', '2026-11-01Z', $1, '2026-12-01Z', 0, 'id', 1, 0, 0, '{}', $2)`
	if _, err := conn.Exec(ctx, insert, "month", "sent"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"week", "sent"}, {"day", "maybe"}} {
		if _, err := conn.Exec(ctx, insert, bad[0], bad[1]); err == nil {
			t.Errorf("accepted granularity %q status %q", bad[0], bad[1])
		}
	}
	migrateTo(t, conn, 3)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('billing_sink_events') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("billing_sink_events after down to 3: %v %v", exists, err)
	}
}
