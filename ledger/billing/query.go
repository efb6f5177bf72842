package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Granularity is the size of a result row's bucket.
type Granularity string

// Granularities.
const (
	Hour   Granularity = "hour"
	Day    Granularity = "day"
	Window Granularity = "window"
)

// ParseGranularity parses "hour", "day" or "window"; "" means Hour.
func ParseGranularity(s string) (Granularity, error) {
	switch Granularity(s) {
	case "":
		return Hour, nil
	case Hour, Day, Window:
		return Granularity(s), nil
	}
	return "", fmt.Errorf("must be hour, day or window, got %q", s)
}

// Limits on a query.
const (
	// MaxKeyLen is the longest key accepted, in bytes.
	MaxKeyLen = 512
	// MaxRange is the longest [from, to) range for hour and day buckets.
	MaxRange = 366 * 24 * time.Hour
	// MaxWindowRange is the longest range for window buckets.
	MaxWindowRange = 31 * 24 * time.Hour
)

// Query asks for one key's usage in [From, To).
type Query struct {
	Key         string
	From, To    time.Time
	Granularity Granularity
}

// FieldError says which query field is wrong.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "billing: " + e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Validate checks the query; its errors are *FieldError.
func (q *Query) Validate() error {
	switch {
	case q.Key == "":
		return &FieldError{"key", errors.New("required")}
	case len(q.Key) > MaxKeyLen:
		return &FieldError{"key", fmt.Errorf("longer than %d bytes", MaxKeyLen)}
	case q.From.IsZero():
		return &FieldError{"from", errors.New("required (RFC 3339)")}
	case q.To.IsZero():
		return &FieldError{"to", errors.New("required (RFC 3339)")}
	case !q.To.After(q.From):
		return &FieldError{"to", errors.New("must be after from")}
	}
	g, err := ParseGranularity(string(q.Granularity))
	if err != nil {
		return &FieldError{"granularity", err}
	}
	limit := MaxRange
	if g == Window {
		limit = MaxWindowRange
	}
	if q.To.Sub(q.From) > limit {
		return &FieldError{"to", fmt.Errorf("range longer than %v for granularity %s", limit, g)}
	}
	return nil
}

// Totals add up a range or a bucket. Cost units.
type Totals struct {
	Spent    int64 `json:"spent"`
	Leased   int64 `json:"leased"`
	Rejected int64 `json:"rejected"`
	Degraded int64 `json:"degraded"`
	// OverAuthorized is Leased − Spent.
	OverAuthorized int64 `json:"over_authorized"`
}

// Row is one bucket.
type Row struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Totals
	// Windows is the number of accounting windows in the bucket.
	Windows int `json:"windows"`
	// IsDegraded: some cost in the bucket was allowed in degraded mode.
	IsDegraded bool `json:"degraded"`
	// Complete: every process sent its final report for every window.
	Complete bool `json:"complete"`
}

// Result answers a Query.
type Result struct {
	Key         string      `json:"key"`
	From        time.Time   `json:"from"`
	To          time.Time   `json:"to"`
	Granularity Granularity `json:"granularity"`
	Totals      Totals      `json:"totals"`
	IsDegraded  bool        `json:"degraded"`
	Complete    bool        `json:"complete"`
	Rows        []Row       `json:"rows"`
}

// Ledger reads usage from Postgres.
type Ledger struct {
	pool *pgxpool.Pool
}

// NewLedger returns a Ledger reading through pool.
func NewLedger(pool *pgxpool.Pool) *Ledger { return &Ledger{pool: pool} }

// bucketSQL selects one row per bucket from usage_windows; $1 key, $2 from,
// $3 to, $4 bucket unit (hour or day; ignored for windows).
const bucketSQL = `SELECT date_trunc($4, window_start, 'UTC') AS b,
       date_trunc($4, window_start, 'UTC') + ('1 ' || $4)::interval AS e,
       sum(spent)::bigint, sum(leased)::bigint, sum(rejected)::bigint, sum(degraded)::bigint,
       count(*)::int, bool_or(is_degraded), bool_and(complete)
FROM usage_windows
WHERE key = $1 AND window_start >= $2 AND window_start < $3
GROUP BY 1 ORDER BY 1`

const windowSQL = `SELECT window_start, window_end, spent, leased, rejected, degraded, 1, is_degraded, complete
FROM usage_windows
WHERE key = $1 AND window_start >= $2 AND window_start < $3
ORDER BY window_start`

// Usage answers q.
func (l *Ledger) Usage(ctx context.Context, q Query) (Result, error) {
	if err := q.Validate(); err != nil {
		return Result{}, err
	}
	g, _ := ParseGranularity(string(q.Granularity))
	res := Result{Key: q.Key, From: q.From.UTC(), To: q.To.UTC(), Granularity: g, Complete: true, Rows: []Row{}}
	sql, args := windowSQL, []any{q.Key, q.From, q.To}
	if g != Window {
		sql, args = bucketSQL, append(args, string(g))
	}
	rows, err := l.pool.Query(ctx, sql, args...)
	if err != nil {
		return Result{}, fmt.Errorf("billing: query: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.Start, &r.End, &r.Spent, &r.Leased, &r.Rejected, &r.Degraded,
			&r.Windows, &r.IsDegraded, &r.Complete); err != nil {
			return Result{}, fmt.Errorf("billing: scan: %w", err)
		}
		r.Start, r.End = r.Start.UTC(), r.End.UTC()
		r.OverAuthorized = r.Leased - r.Spent
		res.Totals.Spent += r.Spent
		res.Totals.Leased += r.Leased
		res.Totals.Rejected += r.Rejected
		res.Totals.Degraded += r.Degraded
		res.IsDegraded = res.IsDegraded || r.IsDegraded
		res.Complete = res.Complete && r.Complete
		res.Rows = append(res.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return Result{}, fmt.Errorf("billing: query: %w", err)
	}
	res.Totals.OverAuthorized = res.Totals.Leased - res.Totals.Spent
	return res, nil
}
