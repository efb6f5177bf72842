package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/migrations"
)

func TestMigrateUpAgainAndDown(t *testing.T) {
	url := testserver.NewDatabase(t)
	ctx := context.Background()
	for range 2 { // the second run is a no-op
		v, err := migrations.Migrate(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if v < 1 {
			t.Fatalf("version %d after Migrate", v)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, view := range []string{"usage_windows", "usage_by_hour", "usage_by_day", "usage_degraded_windows",
		"usage_incomplete_windows", "usage_over_authorization", "usage_closed_windows"} {
		if _, err := conn.Exec(ctx, "SELECT * FROM "+view+" LIMIT 1"); err != nil {
			t.Fatalf("view %s: %v", view, err)
		}
	}
	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname LIKE 'usage%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d usage_ relations left after down (%v)", n, err)
	}
}
