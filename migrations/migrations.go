package migrations

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// FS holds the numbered migration files.
//
//go:embed *.sql
var FS embed.FS

// VersionTable is the table in which tern records the applied version.
const VersionTable = "ledger_schema_version"

// Migrate applies every migration not yet applied to the database at
// postgresURL and returns the resulting schema version. It is safe to run
// concurrently (tern takes an advisory lock) and to run again.
func Migrate(ctx context.Context, postgresURL string) (int32, error) {
	conn, err := pgx.Connect(ctx, postgresURL)
	if err != nil {
		return 0, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(ctx)
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	if err := m.LoadMigrations(FS); err != nil {
		return 0, fmt.Errorf("migrations: load: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return 0, fmt.Errorf("migrations: apply: %w", err)
	}
	v, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: version: %w", err)
	}
	return v, nil
}
