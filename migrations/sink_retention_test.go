package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/quotaplatform/quota/migrations"
)

// 019 round-trips while no retention ran; once sink retention removed
// acknowledged rows (billing_sinks.retained_before), going down is
// refused: the older schema would take a removed period for an unsent one.
func TestSinkRetentionMigrationDown(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 19)
	migrateTo(t, conn, 18)
	migrateTo(t, conn, 19)
	if _, err := conn.Exec(ctx, `INSERT INTO billing_sinks (sink, granularity, retained_before) VALUES ('stripe:m', 'hour', '2026-09-01Z')`); err != nil {
		t.Fatal(err)
	}
	err := tryMigrateTo(t, conn, 18)
	if err == nil || !strings.Contains(err.Error(), "rolling back would resend them") {
		t.Fatalf("down after retention: %v, want refused", err)
	}
	var retained bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('billing_sink_retained') IS NOT NULL`).Scan(&retained); err != nil || !retained {
		t.Fatalf("billing_sink_retained gone after the refused down (%v)", err)
	}
}

// tryMigrateTo moves the database on conn to version v, returning the
// error.
func tryMigrateTo(t *testing.T, conn *pgx.Conn, v int32) error {
	t.Helper()
	ctx := context.Background()
	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		t.Fatal(err)
	}
	return m.MigrateTo(ctx, v)
}
