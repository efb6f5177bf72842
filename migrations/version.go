package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Latest is the version Migrate brings a database to: the number of the
// newest file in FS. A reconciler needs its schema at least this far.
func Latest() int32 {
	entries, _ := fs.ReadDir(FS, ".") // embedded: cannot fail
	var latest int32
	for _, e := range entries {
		num, _, _ := strings.Cut(e.Name(), "_")
		if n, err := strconv.ParseInt(num, 10, 32); err == nil && int32(n) > latest {
			latest = int32(n)
		}
	}
	return latest
}

// A Querier runs one query; *pgx.Conn and *pgxpool.Pool are Queriers.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Current is the version of the schema q's database holds: 0 when it was
// never migrated.
func Current(ctx context.Context, q Querier) (int32, error) {
	var v int32
	err := q.QueryRow(ctx, "SELECT version FROM "+pgx.Identifier{VersionTable}.Sanitize()).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("migrations: read the schema version: %w", err)
	}
	return v, nil
}
