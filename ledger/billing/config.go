package billing

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/field"
	"github.com/quotaplatform/quota/region/store"
)

// Config bounds the queries of a Ledger and the pool NewPool makes for them.
type Config struct {
	// MaxRows is the most rows (buckets) one query may answer; a query
	// whose range holds more is refused before it runs (*FieldError on
	// "to"). Default 10,000.
	MaxRows int
	// StatementTimeout bounds each query twice: as a context deadline in
	// Usage, and as the statement_timeout of every connection NewPool
	// opens (so Postgres stops the query even if the client is gone).
	// Rounded up to whole milliseconds. Default 5s.
	StatementTimeout time.Duration
	// MaxConns is the size of the pool NewPool makes: billing queries never
	// take more connections than this, whatever else uses the database.
	// Default 4.
	MaxConns int32
	// Window is the limiters' accounting window (region.Config.Window),
	// used to count the rows of a window-granularity query before it runs
	// (the reconciler's --window).
	// A query that returns more than MaxRows windows anyway (the limiters
	// use shorter windows) is refused as well. Default store.DefaultWindow.
	Window time.Duration
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{MaxRows: 10_000, StatementTimeout: 5 * time.Second, MaxConns: 4, Window: store.DefaultWindow}
}

// validate is Validate, for NewPool and NewLedger.
func (c *Config) validate() error { return c.Validate() }

// Validate checks every field and reports every bad one, each a
// *field.Error naming it (internal/field).
func (c Config) Validate() error {
	ch := field.Check{Prefix: "billing: "}
	check := ch.That
	check(c.MaxRows >= 1, "MaxRows", "must be at least 1, got %d", c.MaxRows)
	check(c.StatementTimeout > 0, "StatementTimeout", "must be positive, got %v", c.StatementTimeout)
	check(c.MaxConns >= 1, "MaxConns", "must be at least 1, got %d", c.MaxConns)
	check(c.Window > 0, "Window", "must be positive, got %v", c.Window)
	return ch.Err()
}

// NewPool returns a pool for billing queries on the database of connString
// (a Postgres URL or DSN): at most cfg.MaxConns connections, each with
// statement_timeout = cfg.StatementTimeout and read-only transactions by
// default, named "quota-billing" in pg_stat_activity unless connString
// names it. It connects lazily: a Postgres that is down fails queries, not
// this call. The caller closes it.
func NewPool(connString string, cfg Config) (*pgxpool.Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("billing: pool: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	params := pc.ConnConfig.RuntimeParams
	params["statement_timeout"] = strconv.FormatInt(statementTimeoutMS(cfg.StatementTimeout), 10)
	params["default_transaction_read_only"] = "on"
	if params["application_name"] == "" {
		params["application_name"] = "quota-billing"
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("billing: pool: %w", err)
	}
	return pool, nil
}

// statementTimeoutMS is d in whole milliseconds, rounded up: Postgres reads
// statement_timeout 0 as "no limit".
func statementTimeoutMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
