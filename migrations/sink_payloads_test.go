package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/tern/v2/migrate"

	"github.com/quotaplatform/quota/migrations"
)

// 010 lets billing_sink_events hold pending and held events of hour
// periods with their frame, and stripe_customers an anchor day and zone
// (both or neither); its down part turns pending and held rows into
// failed ones and keeps hour rows aside, and a re-upgrade puts back what
// the down part put aside: hour rows, and the statuses and frames of rows
// nothing touched while rolled back. Nothing sent is forgotten, so
// nothing is sent again.
func TestSinkPayloadsMigration(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 21) // the rows go down from there; 022 renames spent
	insert := `INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision, event_id,
		spent, rejected, degraded, data, status, frame, first_attempt_at)
		VALUES ('s', $1, '2026-11-01Z', $2, '2026-12-01Z', 0, 'id', 1, 0, 0, '{}', $3, '{"identifier":"x"}', now())`
	for _, ok := range [][3]string{{"k1", "hour", "pending"}, {"k2", "month", "held"}, {"k3", "day", "sent"}, {"k5", "month", "pending"}} {
		if _, err := conn.Exec(ctx, insert, ok[0], ok[1], ok[2]); err != nil {
			t.Fatalf("%v: %v", ok, err)
		}
	}
	if _, err := conn.Exec(ctx, insert, "k4", "week", "sent"); err == nil {
		t.Error("accepted granularity week")
	}
	cus := `INSERT INTO stripe_customers (key, stripe_customer_id, anchor_day, time_zone) VALUES ($1, 'cus_A', $2, $3)`
	if _, err := conn.Exec(ctx, cus, "a", 31, "America/New_York"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		day  any
		zone any
	}{{0, "UTC"}, {32, "UTC"}, {5, nil}, {nil, "UTC"}} {
		if _, err := conn.Exec(ctx, cus, "b", bad.day, bad.zone); err == nil {
			t.Errorf("accepted anchor %v %v", bad.day, bad.zone)
		}
	}
	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 9); err != nil {
		t.Fatal(err)
	}
	var statuses string
	if err := conn.QueryRow(ctx, `SELECT string_agg(key || ':' || status, ',' ORDER BY key) FROM billing_sink_events`).
		Scan(&statuses); err != nil || statuses != "k2:failed,k3:sent,k5:failed" {
		t.Fatalf("rows after down to 9: %q, %v", statuses, err)
	}
	// The older release sends k2 again while rolled back.
	if _, err := conn.Exec(ctx, `UPDATE billing_sink_events SET status = 'sent', attempts = 2, updated_at = now() + interval '1 second' WHERE key = 'k2'`); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 10); err != nil {
		t.Fatal(err)
	}
	const rows = `SELECT string_agg(key || ':' || granularity || ':' || status || ':' || coalesce(frame->>'identifier', '-'), ',' ORDER BY key)
		FROM billing_sink_events`
	if err := conn.QueryRow(ctx, rows).Scan(&statuses); err != nil ||
		statuses != "k1:hour:pending:x,k2:month:sent:-,k3:day:sent:x,k5:month:pending:x" {
		t.Fatalf("rows after re-upgrade to 10: %q, %v", statuses, err)
	}
	var kept *string
	if err := conn.QueryRow(ctx, `SELECT to_regclass('billing_sink_events_010_kept')::text`).Scan(&kept); err != nil || kept != nil {
		t.Fatalf("the table of kept rows outlives the re-upgrade: %v, %v", kept, err)
	}
}
