// Package pgledger is the Postgres ledger a quotabase.Server reads quota
// bases from: one query on usage_reports per request, on a read-only pool
// of its own. It is apart from ledger/quotabase so that the limiters,
// which import quotabase for its Client, link no Postgres driver.
package pgledger

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/ledger/quotabase"
)

// Query sums a key's spent cost in the windows that start in [$2, $3), by
// region: one index range on the primary key (key, window_start, …) in
// each month partition the range prunes to. Spent is what billing charges
// (migrations/007): allowed + charged − refunded, each row's floored at
// zero, so that no row (a forged refund of the largest counter) can lower
// the base below what the other rows spent, and the sum saturated rather
// than overflow (issue 37, item 2).
const Query = `SELECT region, usage_saturate(coalesce(sum(greatest(spent + charged - refunded, 0)), 0))
FROM usage_reports
WHERE key = $1 AND window_start >= $2 AND window_start < $3
GROUP BY region`

// Ledger reads bases from the ledger's usage_reports: a quotabase.Ledger.
type Ledger struct{ pool *pgxpool.Pool }

var _ quotabase.Ledger = (*Ledger)(nil)

// New returns a Ledger on pool, whose database is migrated (migrations/).
// A pool from NewPool bounds each query in Postgres as well.
func New(pool *pgxpool.Pool) *Ledger { return &Ledger{pool: pool} }

// SpentByRegion runs Query. The Server gives ctx its deadline
// (quotabase.Config.StatementTimeout).
func (l *Ledger) SpentByRegion(ctx context.Context, key string, start, end time.Time) (map[string]int64, error) {
	rows, err := l.pool.Query(ctx, Query, key, start, end)
	if err != nil {
		return nil, fmt.Errorf("pgledger: query: %w", err)
	}
	defer rows.Close()
	out := make(map[string]int64, 4)
	for rows.Next() {
		var region string
		var spent int64
		if err := rows.Scan(&region, &spent); err != nil {
			return nil, fmt.Errorf("pgledger: scan: %w", err)
		}
		out[region] = spent
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgledger: query: %w", err)
	}
	return out, nil
}

// NewPool returns the Server's own pool on the ledger database of
// connString (a Postgres URL or DSN): at most cfg.MaxConcurrent
// connections, so that requests never wait for one and never take the
// connections the reconciler's writer needs, each with statement_timeout =
// cfg.StatementTimeout (Postgres stops a query whose client is gone) and
// read-only transactions, named "quota-base" in pg_stat_activity unless
// connString names it. It connects lazily: a Postgres that is down fails
// queries, not this call. The caller closes it.
func NewPool(connString string, cfg quotabase.Config) (*pgxpool.Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgledger: pool: %w", err)
	}
	pc.MaxConns = int32(cfg.MaxConcurrent)
	params := pc.ConnConfig.RuntimeParams
	params["statement_timeout"] = statementTimeoutMS(cfg.StatementTimeout)
	params["default_transaction_read_only"] = "on"
	if params["application_name"] == "" {
		params["application_name"] = "quota-base"
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("pgledger: pool: %w", err)
	}
	return pool, nil
}

// statementTimeoutMS is d in whole milliseconds, rounded up: Postgres reads
// statement_timeout 0 as "no limit".
func statementTimeoutMS(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}
