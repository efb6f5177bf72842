package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/migrations"
)

// 004 creates billing_sink_events, whose checks refuse an unknown status
// or granularity, and its down part drops it.
func TestSinkEventsMigration(t *testing.T) {
	url := testserver.NewDatabase(t)
	ctx := context.Background()
	if v, err := migrations.Migrate(ctx, url); err != nil || v < 4 {
		t.Fatalf("version %d, %v", v, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
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
	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('billing_sink_events') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("billing_sink_events after down to 3: %v %v", exists, err)
	}
}
