package billing

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/region/store"
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
	case len(q.Key) > store.MaxKeyLen:
		return &FieldError{"key", fmt.Errorf("longer than %d bytes", store.MaxKeyLen)}
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

// Totals add up a range or a bucket. Cost units. The billing figures are
// named as on every surface (API, CLI, CSV, export, views): Allowed
// (gross), Charged, Refunded and Net = Allowed + Charged − Refunded.
type Totals struct {
	// Net is Allowed + Charged − Refunded (docs/design.md [idempotency]):
	// the bucket's billed usage before carry-over (the export's billed).
	// Until this release it was repeated as spent, which is gone from
	// every billing surface (ledger/README.md, Vocabulary).
	Net      int64 `json:"net"`
	Leased   int64 `json:"leased"`
	Rejected int64 `json:"rejected"`
	Degraded int64 `json:"degraded"`
	// OverAuthorized is Leased − Allowed.
	OverAuthorized int64 `json:"over_authorized"`
	// Allowed is the cost of allowed decisions; Refunded the cost given
	// back by refunds (POST /v1/refund) and Charged the cost taken by
	// post-hoc charges (POST /v1/charge) in the bucket's windows.
	Allowed  int64 `json:"allowed"`
	Refunded int64 `json:"refunded"`
	Charged  int64 `json:"charged"`
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
	// Complete: every process sent its final report for every window, or
	// the reconciler closed its row (ClosedByReconciler).
	Complete bool `json:"complete"`
	// ClosedByReconciler is the number of the bucket's windows in which
	// the reconciler closed a process's row: the process sent nothing for
	// reconciler serve --close-after past the window's end (it died
	// without its final report), and its last report is what is billed.
	ClosedByReconciler int `json:"closed_by_reconciler"`
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
	// ClosedByReconciler is the sum of the rows' (Row.ClosedByReconciler).
	ClosedByReconciler int   `json:"closed_by_reconciler"`
	Rows               []Row `json:"rows"`
}

// ErrTimeout: a query ran longer than Config.StatementTimeout and was
// stopped.
var ErrTimeout = errors.New("billing: query exceeded the statement timeout")

// ErrOverflow: a figure of the key's usage passes ±(2^63−1), the ledger's
// overflow guard (the views' overflow column; migration 011): the key's
// reports are not what any process spends, and its answer would not be
// exact. Other keys are not affected.
var ErrOverflow = errors.New("billing: the key's usage passes the overflow guard (a figure beyond ±(2^63-1))")

// Ledger reads usage from Postgres. It is safe for concurrent use.
type Ledger struct {
	pool *pgxpool.Pool
	cfg  Config
}

// NewLedger returns a Ledger reading through pool (make it with NewPool, so
// that Postgres enforces cfg.StatementTimeout too). It validates a copy of
// cfg.
func NewLedger(pool *pgxpool.Pool, cfg Config) (*Ledger, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Ledger{pool: pool, cfg: cfg}, nil
}

// bucketSQL selects one row per bucket from usage_windows; $1 key, $2 from,
// $3 to, $4 bucket unit (hour or day), $5 most rows.
const bucketSQL = `SELECT date_trunc($4, window_start, 'UTC') AS b,
       date_trunc($4, window_start, 'UTC') + ('1 ' || $4)::interval AS e,
       usage_saturate(sum(net)), usage_saturate(sum(leased)), usage_saturate(sum(rejected)), usage_saturate(sum(degraded)),
       count(*)::int, bool_or(is_degraded), bool_and(complete),
       usage_saturate(sum(allowed)), usage_saturate(sum(refunded)), usage_saturate(sum(charged)),
       bool_or(overflow) OR usage_overflows(sum(net), sum(leased), sum(rejected), sum(degraded),
                                            sum(allowed), sum(refunded), sum(charged)),
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int
FROM usage_windows
WHERE key = $1 AND window_start >= $2 AND window_start < $3
GROUP BY 1 ORDER BY 1
LIMIT $5`

// windowSQL selects one row per window; $4 most rows.
const windowSQL = `SELECT window_start, window_end, net, leased, rejected, degraded, 1, is_degraded, complete,
       allowed, refunded, charged, overflow, (closed_by_reconciler > 0)::int
FROM usage_windows
WHERE key = $1 AND window_start >= $2 AND window_start < $3
ORDER BY window_start
LIMIT $4`

// Buckets is the most rows q can answer: the UTC hours or days that
// [From, To) touches, or for Window granularity the windows of length
// window that can start in it.
func (q *Query) Buckets(window time.Duration) int64 {
	g, _ := ParseGranularity(string(q.Granularity))
	if g == Window {
		if window <= 0 {
			window = DefaultConfig().Window
		}
		return int64((q.To.Sub(q.From) + window - 1) / window)
	}
	size := time.Hour
	if g == Day {
		size = 24 * time.Hour
	}
	// Truncate works on absolute time, so these are UTC hours and days.
	first, last := q.From.Truncate(size), q.To.Add(-time.Nanosecond).Truncate(size)
	return int64(last.Sub(first)/size) + 1
}

// tooManyRows is the *FieldError for a query over the row limit.
func (l *Ledger) tooManyRows(q Query, n string) error {
	return &FieldError{"to", fmt.Errorf("[from, to) holds %s %s rows, more than the limit of %d: shorten the range or use a coarser granularity",
		n, q.Granularity, l.cfg.MaxRows)}
}

// Usage answers q. A query over the row limit is a *FieldError; one that
// runs longer than the statement timeout wraps ErrTimeout.
func (l *Ledger) Usage(ctx context.Context, q Query) (Result, error) {
	if err := q.Validate(); err != nil {
		return Result{}, err
	}
	q.Granularity, _ = ParseGranularity(string(q.Granularity))
	if n := q.Buckets(l.cfg.Window); n > int64(l.cfg.MaxRows) {
		return Result{}, l.tooManyRows(q, strconv.FormatInt(n, 10))
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StatementTimeout)
	defer cancel()
	res, err := l.query(ctx, q)
	if err != nil && isTimeout(err) {
		return Result{}, fmt.Errorf("%w (%v): %w", ErrTimeout, l.cfg.StatementTimeout, err)
	}
	return res, err
}

// query runs q's SQL and adds up its rows.
func (l *Ledger) query(ctx context.Context, q Query) (Result, error) {
	res := Result{Key: q.Key, From: q.From.UTC(), To: q.To.UTC(), Granularity: q.Granularity, Complete: true, Rows: []Row{}}
	sql, args := windowSQL, []any{q.Key, q.From, q.To}
	if q.Granularity != Window {
		sql, args = bucketSQL, append(args, string(q.Granularity))
	}
	args = append(args, l.cfg.MaxRows+1)
	rows, err := l.pool.Query(ctx, sql, args...)
	if err != nil {
		return Result{}, fmt.Errorf("billing: query: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if len(res.Rows) == l.cfg.MaxRows {
			return Result{}, l.tooManyRows(q, "more than "+strconv.Itoa(l.cfg.MaxRows))
		}
		var r Row
		var overflow bool
		if err := rows.Scan(&r.Start, &r.End, &r.Net, &r.Leased, &r.Rejected, &r.Degraded,
			&r.Windows, &r.IsDegraded, &r.Complete, &r.Allowed, &r.Refunded, &r.Charged, &overflow,
			&r.ClosedByReconciler); err != nil {
			return Result{}, fmt.Errorf("billing: scan: %w", err)
		}
		if overflow || !res.add(r) {
			return Result{}, fmt.Errorf("%w: bucket %v", ErrOverflow, r.Start.UTC()) // no key: this error is logged
		}
	}
	if err := rows.Err(); err != nil {
		return Result{}, fmt.Errorf("billing: query: %w", err)
	}
	res.Totals.OverAuthorized = res.Totals.Leased - res.Totals.Allowed
	return res, nil
}

// add appends bucket r and adds it to the totals; false when a total
// would pass the int64 range (ErrOverflow), which Go would wrap.
func (res *Result) add(r Row) bool {
	for _, p := range [...]struct{ total, v int64 }{{res.Totals.Net, r.Net}, {res.Totals.Allowed, r.Allowed},
		{res.Totals.Refunded, r.Refunded}, {res.Totals.Charged, r.Charged}, {res.Totals.Leased, r.Leased},
		{res.Totals.Rejected, r.Rejected}, {res.Totals.Degraded, r.Degraded}, {r.Leased, -r.Allowed}} {
		if s := p.total + p.v; (p.v > 0 && s < p.total) || (p.v < 0 && s > p.total) {
			return false
		}
	}
	r.Start, r.End = r.Start.UTC(), r.End.UTC()
	r.OverAuthorized = r.Leased - r.Allowed
	res.Totals.Net += r.Net
	res.Totals.Allowed += r.Allowed
	res.Totals.Refunded += r.Refunded
	res.Totals.Charged += r.Charged
	res.Totals.Leased += r.Leased
	res.Totals.Rejected += r.Rejected
	res.Totals.Degraded += r.Degraded
	res.IsDegraded = res.IsDegraded || r.IsDegraded
	res.Complete = res.Complete && r.Complete
	res.ClosedByReconciler += r.ClosedByReconciler
	res.Rows = append(res.Rows, r)
	// Totals.OverAuthorized = Leased − Allowed (Allowed ≥ 0) must not wrap either.
	return res.Totals.Allowed <= 0 || res.Totals.Leased >= math.MinInt64+res.Totals.Allowed
}

// isTimeout reports whether err is a query stopped by its deadline or by
// Postgres' statement_timeout (SQLSTATE 57014, query_canceled).
func isTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pgErr) && pgErr.Code == "57014")
}
