package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/migrations"
)

// TestCurrentAndLatest: Current reads 0 from a database never migrated,
// the version a partial migration reached, and Latest once Migrate ran,
// which is the version Migrate reports.
func TestCurrentAndLatest(t *testing.T) {
	ctx := context.Background()
	url := testserver.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	current := func() int32 {
		t.Helper()
		v, err := migrations.Current(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := current(); v != 0 {
		t.Fatalf("never migrated: Current = %d, want 0", v)
	}
	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		t.Fatal(err)
	}
	older := migrations.Latest() - 1
	if err := m.MigrateTo(ctx, older); err != nil {
		t.Fatal(err)
	}
	if v := current(); v != older {
		t.Fatalf("migrated to %d: Current = %d", older, v)
	}
	v, err := migrations.Migrate(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if v != migrations.Latest() || current() != v {
		t.Fatalf("Migrate reached %d, Latest = %d, Current = %d", v, migrations.Latest(), current())
	}
}
