package export

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quotaplatform/quota/ledger/billing"
)

// Config bounds the pages of an export.
type Config struct {
	// PageRows is the most rows one page query returns and the export
	// holds in memory: a page takes PageRows / (periods in the range) keys
	// (at least one). Default 10,000 (1,000 keys of a ten-day export, all
	// the keys up to 10,000 of a one-month one).
	PageRows int
	// StatementTimeout bounds each page's query (a context deadline; the
	// billing pool's statement_timeout applies too). A whole export may
	// take far longer. Default 5s.
	StatementTimeout time.Duration
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{PageRows: 10_000, StatementTimeout: 5 * time.Second}
}

func (c *Config) validate() error {
	var errs []error
	if c.PageRows < 1 {
		errs = append(errs, fmt.Errorf("export: PageRows must be at least 1, got %d", c.PageRows))
	}
	if c.StatementTimeout <= 0 {
		errs = append(errs, fmt.Errorf("export: StatementTimeout must be positive, got %v", c.StatementTimeout))
	}
	return errors.Join(errs...)
}

// Querier is the part of a pgx pool or connection that Exporter uses.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Exporter reads period rows from the ledger. It is safe for concurrent
// use.
type Exporter struct {
	db  Querier
	cfg Config
}

// New returns an Exporter reading through db (the billing pool of
// billing.NewPool in the daemon). It validates a copy of cfg.
func New(db Querier, cfg Config) (*Exporter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Exporter{db: db, cfg: cfg}, nil
}

// ErrTimeout is billing's: one page's query ran past the statement timeout.
var ErrTimeout = billing.ErrTimeout

// pageSQL selects the rows of the next page of keys. $1 from, $2 to, $3
// the lower key bound, $4 the most keys, $5 the granularity; %s the lower
// bound's operator (> or >=) and the prefix's upper bound, if any. The
// keys of a page are contiguous, so the rows are read by a key range on
// the primary key (key, window_start, process_id) of each month partition
// before to: the periods before from are read too, for the carry-over
// (Row), which runs over each key's whole history in the ledger.
//
// Sums are numeric and saturated at ±(2^63−1) (usage_saturate, migration
// 011): a key whose figures pass that bound (the ledger's overflow guard)
// gets saturated figures and Complete false, so that no sink bills it,
// rather than failing the page for every key.
//
// The carry is computed in closed form: with N(p) the key's cumulative
// net up to period p and B(p) = max(0, max of N(q) for q ≤ p) its
// cumulative billed (billing never goes back), the credit carried into p
// is B(p−1) − N(p−1); Carry turns it and p's net into Billed and
// CarriedOut (Billed = B(p) − B(p−1), CarriedOut = B(p) − N(p)).
const pageSQL = `WITH page AS (
    SELECT DISTINCT key FROM usage_reports
    WHERE window_start >= $1 AND window_start < $2 AND key %s $3 %s
    ORDER BY key LIMIT $4),
kp AS (
    SELECT key, date_trunc($5, window_start, 'UTC') AS period,
           sum(spent) AS spent, sum(rejected) AS rejected, sum(degraded) AS degraded,
           sum(refunded) AS refunded, sum(charged) AS charged,
           sum(spent) + sum(charged) - sum(refunded) AS net,
           count(DISTINCT window_start) AS windows, bool_and(final) AS final
    FROM usage_reports
    WHERE window_start < $2
      AND key >= (SELECT min(key) FROM page) AND key <= (SELECT max(key) FROM page)
    GROUP BY 1, 2),
cum AS (
    SELECT *, sum(net) OVER (PARTITION BY key ORDER BY period ROWS UNBOUNDED PRECEDING) AS cum_net
    FROM kp),
billed AS (
    SELECT *, greatest(0, max(cum_net) OVER (PARTITION BY key ORDER BY period ROWS UNBOUNDED PRECEDING)) AS cum_billed
    FROM cum),
carried AS (
    SELECT *, coalesce(lag(cum_billed) OVER (PARTITION BY key ORDER BY period), 0) - (cum_net - net) AS carried_in
    FROM billed)
SELECT key, period, usage_saturate(spent), usage_saturate(rejected), usage_saturate(degraded), windows::bigint,
       final AND NOT usage_overflows(spent, rejected, degraded, refunded, charged, net, carried_in),
       usage_saturate(refunded), usage_saturate(charged), usage_saturate(net), usage_saturate(carried_in)
FROM carried
WHERE period >= $1 AND key IN (SELECT key FROM page)
ORDER BY 1, 2`

// Export reads q's rows page by page and calls page with each page's rows,
// in key then period order; the slice is reused after page returns. It
// stops at the first error of a query or of page. A query that runs past
// the statement timeout wraps ErrTimeout; the rows already handed to page
// stay valid, and the Cursor of the last one resumes the export.
func (e *Exporter) Export(ctx context.Context, q Query, page func([]Row) error) error {
	if err := q.Validate(); err != nil {
		return err
	}
	q.Granularity, _ = ParseGranularity(string(q.Granularity))
	keysPerPage := max(1, e.cfg.PageRows/q.Granularity.periods(q.From, q.To))
	lower, inclusive := q.After, false
	if !q.Cursor.IsZero() {
		lower, inclusive = q.Cursor.Key, true
	}
	buf := make([]Row, 0, min(e.cfg.PageRows, 1024))
	for first := true; ; first = false {
		var err error
		buf, err = e.page(ctx, q, lower, inclusive, keysPerPage, buf[:0])
		if err != nil {
			return err
		}
		if first && !q.Cursor.IsZero() {
			buf = dropThrough(buf, q.Cursor)
		}
		if len(buf) == 0 {
			if first && !q.Cursor.IsZero() {
				// The cursor's key had no row after the cursor: go on
				// from the next key.
				lower, inclusive = q.Cursor.Key, false
				continue
			}
			return nil
		}
		if err := page(buf); err != nil {
			return err
		}
		lower, inclusive = buf[len(buf)-1].Key, false
	}
}

// dropThrough removes the rows up to and including cursor c.
func dropThrough(rows []Row, c Cursor) []Row {
	n := 0
	for n < len(rows) && rows[n].Key == c.Key && !rows[n].PeriodStart.After(c.PeriodStart) {
		n++
	}
	return append(rows[:0], rows[n:]...)
}

// page runs one page's query into buf.
func (e *Exporter) page(ctx context.Context, q Query, lower string, inclusive bool, keys int, buf []Row) ([]Row, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout)
	defer cancel()
	op, upper := ">", ""
	if inclusive {
		op = ">="
	}
	args := []any{q.From, q.To, lower, keys, string(q.Granularity)}
	if q.Prefix != "" {
		// key >= prefix starts the scan at the prefix; there is no upper
		// bound that holds in every collation, so the last page of a
		// prefix reads on to the end of the key range.
		upper = "AND key >= $6 AND starts_with(key, $6)"
		args = append(args, q.Prefix)
	}
	rows, err := e.db.Query(ctx, fmt.Sprintf(pageSQL, op, upper), args...)
	if err != nil {
		return buf, wrapErr(err, e.cfg.StatementTimeout)
	}
	defer rows.Close()
	for rows.Next() {
		var r Row
		var final bool
		if err := rows.Scan(&r.Key, &r.PeriodStart, &r.Spent, &r.Rejected, &r.Degraded, &r.Windows, &final,
			&r.Refunded, &r.Charged, &r.Net, &r.CarriedIn); err != nil {
			return buf, fmt.Errorf("export: scan: %w", err)
		}
		r.Billed, r.CarriedOut = Carry(r.CarriedIn, r.Net)
		r.PeriodStart = r.PeriodStart.UTC()
		r.PeriodEnd = q.Granularity.Next(r.PeriodStart)
		r.Complete = final && !r.PeriodEnd.After(q.Now)
		buf = append(buf, r)
	}
	if err := rows.Err(); err != nil {
		return buf, wrapErr(err, e.cfg.StatementTimeout)
	}
	return buf, nil
}

func wrapErr(err error, timeout time.Duration) error {
	var pgErr *pgconn.PgError
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pgErr) && pgErr.Code == "57014") {
		return fmt.Errorf("%w (%v per page): %w", ErrTimeout, timeout, err)
	}
	return fmt.Errorf("export: query: %w", err)
}
