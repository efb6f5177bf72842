package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/clock"
)

// CloserConfig configures a Closer. Start from DefaultCloserConfig; NewCloser
// validates a copy.
type CloserConfig struct {
	// After is how long a process may stay silent before its window is
	// closed for it: a non-final row of usage_reports is closed once its
	// window ended more than After ago and its last report was written
	// more than After ago. Longer than any delay a live process's final
	// report can see (report interval, spool replay after a NATS outage,
	// the reconciler's own backlog), or live processes' windows are
	// closed early; a report that comes after the closing still lands
	// (the Writer's merge ignores final), and the sinks then send a
	// correction. Default 15m; must be positive.
	After time.Duration
	// Interval is the time between two passes (the first runs at once).
	// A dead process's window is closed between After and After +
	// Interval after its end (more when a pass is bounded by
	// BatchesPerTick). Default 30s.
	Interval time.Duration
	// BatchRows is the most rows one statement closes. Default 1000.
	BatchRows int
	// BatchesPerTick bounds the statements of one pass (closing
	// statements and the one that ends a month range): a pass over a
	// long history, or one with many rows to close, goes on at the next
	// tick. Default 20.
	BatchesPerTick int
	// Rescan is how often a pass starts again from the oldest month of
	// the ledger instead of where the last one ended, to close rows
	// written for windows the passes had gone past (a spool replayed long
	// after its windows, by a process that then died). Every start of the
	// Closer begins with such a pass. Default 24h.
	Rescan time.Duration
	// Name is written to usage_reports.closed_by (e.g. the durable and
	// host). Default "reconciler".
	Name string
	// Clock paces the passes and tells their now. Default the system clock.
	Clock clock.Clock
	// Logger receives errors; nil discards.
	Logger *slog.Logger
	// Metrics, when set, are updated; see NewCloserMetrics.
	Metrics *CloserMetrics
}

// DefaultCloserConfig returns the documented defaults.
func DefaultCloserConfig() CloserConfig {
	return CloserConfig{
		After:          15 * time.Minute,
		Interval:       30 * time.Second,
		BatchRows:      1000,
		BatchesPerTick: 20,
		Rescan:         24 * time.Hour,
		Name:           "reconciler",
	}
}

func (c *CloserConfig) validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("reconcile: closer config %s: "+format, append([]any{field}, args...)...))
		}
	}
	check(c.After > 0, "After", "must be positive, got %v", c.After)
	check(c.Interval > 0, "Interval", "must be positive, got %v", c.Interval)
	check(c.BatchRows >= 1, "BatchRows", "must be at least 1, got %d", c.BatchRows)
	check(c.BatchesPerTick >= 2, "BatchesPerTick", "must be at least 2, got %d", c.BatchesPerTick)
	check(c.Rescan > 0, "Rescan", "must be positive, got %v", c.Rescan)
	check(c.Name != "", "Name", "must not be empty")
	return errors.Join(errs...)
}

// CloserMetrics are a Closer's Prometheus metrics.
type CloserMetrics struct {
	// Closed counts the rows (a process's window) the Closer marked final.
	Closed prometheus.Counter
	// Errors counts failed passes.
	Errors prometheus.Counter
	// LastPass is the Unix time of the last pass that succeeded.
	LastPass prometheus.Gauge
}

// NewCloserMetrics creates a Closer's metrics and registers them on reg
// (nil: not registered).
func NewCloserMetrics(reg prometheus.Registerer) *CloserMetrics {
	m := &CloserMetrics{
		Closed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "windows_closed_total", Help: "Windows of a process (usage_reports rows) the reconciler marked final because the process sent nothing for --close-after past the window's end: it died without its final report, and its last report is billed."}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "close_errors_total", Help: "Passes of the window closer that failed (retried at the next tick)."}),
		LastPass: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "close_last_pass_timestamp_seconds", Help: "Unix time of the window closer's last successful pass."}),
	}
	if reg != nil {
		reg.MustRegister(m.Closed, m.Errors, m.LastPass)
	}
	return m
}

// Closer closes the windows of dead processes: it marks final, with
// closed_at and closed_by, every row of usage_reports whose process sent
// nothing for CloserConfig.After past the window's end (migration 009).
// Without it a process killed before its final report (SIGKILL, OOM, a
// lost node) would keep its keys' windows, hours and billing periods
// incomplete for ever, and no sink would send them.
//
// A pass scans usage_reports by window_start, one month partition at a
// time (partition pruning and the BRIN index on window_start), from where
// the last pass ended to now − After, and closes at most BatchRows rows per
// statement and BatchesPerTick statements per tick. It resumes at the
// earliest row it left open (a live process's window, a row locked by a
// writer) or first written since the last pass behind where the passes had
// got to (found by first_seen), so a steady-state pass reads about one
// Interval's windows. Every Rescan, and at its start, a pass reads the
// whole ledger.
//
// Several reconcilers may run Closers on one ledger: rows are locked with
// SKIP LOCKED (a Closer never waits for a writer, so it never takes part in
// a deadlock) and closed only while still non-final.
//
// Run owns one goroutine (the caller's). Close is not safe for concurrent
// use, nor with Run.
type Closer struct {
	pool *pgxpool.Pool
	cfg  CloserConfig

	// The scan's position, used by one goroutine at a time.
	from      time.Time // next window_start to scan; zero: start a pass at the oldest month
	pending   time.Time // earliest window_start left open by this pass; zero: none
	passStart time.Time // when the current pass from the oldest month began
	inserted  time.Time // Postgres's clock at the last look for new rows (insertedSQL)
}

// NewCloser returns a Closer writing through pool. It validates a copy of
// cfg.
func NewCloser(pool *pgxpool.Pool, cfg CloserConfig) (*Closer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("reconcile: NewCloser needs a pool")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Closer{pool: pool, cfg: cfg}, nil
}

// Run closes windows at once and then every Interval until ctx ends; it
// returns ctx's error. A failed pass is logged, counted and tried again at
// the next tick.
func (c *Closer) Run(ctx context.Context) error {
	tick := c.cfg.Clock.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		if n, err := c.Close(ctx, c.cfg.Clock.Now()); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.cfg.Logger.Error("closing the windows of silent processes", "err", err)
			if c.cfg.Metrics != nil {
				c.cfg.Metrics.Errors.Inc()
			}
		} else if n > 0 {
			c.cfg.Logger.Warn("closed the windows of processes that sent no final report", "rows", n, "close_after", c.cfg.After)
		}
		select {
		case <-tick.C():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// closeSQL closes up to $4 due rows with window_start in [$1, $2): non-final,
// window ended before $3 and last written before $3 (now − After). A
// window is taken to end by $7 (MaxWindow) after its start whatever its
// window_end says: the sender's word must not keep a row open for ever. The
// rows are locked SKIP LOCKED, so a row a writer holds is left for a later
// pass; the locking re-reads each row, so one made final meanwhile is left
// alone. closed_at is $5, closed_by $6; updated_at is not touched (it is
// the last report's time, and a later report moves it past closed_at).
const closeSQL = `WITH due AS (
    SELECT key, window_start, region, process_id FROM usage_reports
    WHERE window_start >= $1 AND window_start < $2 AND NOT final
      AND least(window_end, window_start + $7::interval) < $3 AND updated_at < $3
    LIMIT $4
    FOR UPDATE SKIP LOCKED),
closed AS (
    UPDATE usage_reports u SET final = true, closed_at = $5, closed_by = $6
    FROM due
    WHERE u.key = due.key AND u.window_start = due.window_start AND u.region = due.region
      AND u.process_id = due.process_id
      AND u.window_start >= $1 AND u.window_start < $2
    RETURNING 1)
SELECT count(*) FROM closed`

// openSQL is the earliest window_start in [$1, $2) of a row still open.
const openSQL = `SELECT min(window_start) FROM usage_reports WHERE window_start >= $1 AND window_start < $2 AND NOT final`

// insertedSQL is the earliest window_start of the open rows first written
// since $1 (Postgres's clock; first_seen, BRIN-indexed by migration 009),
// whatever their window, and Postgres's clock now. A row is first written
// up to a window (and a report interval, and the stream's lag) after its
// window starts, and far later from a spool replayed after an outage: such
// a row may start behind where the passes have got to, and this sends the
// next pass back for it.
const insertedSQL = `SELECT (SELECT min(window_start) FROM usage_reports WHERE first_seen >= $1 AND NOT final), statement_timestamp()`

// insertedSlack is how far before the last look insertedSQL looks again:
// first_seen is its transaction's start, and a writer's transaction that
// began before the last look may have committed after it.
const insertedSlack = time.Minute

// oldestSQL is the lower bound of usage_reports' oldest month partition.
const oldestSQL = `SELECT min(substring(pg_get_expr(c.relpartbound, c.oid) FROM $re$FROM \('([^']+)'\)$re$)::timestamptz)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'usage_reports'::regclass`

// Close runs one pass at instant now: it closes the due rows (see
// Closer) from where the last pass ended up to now − After, within
// BatchesPerTick statements, and returns how many it closed.
func (c *Closer) Close(ctx context.Context, now time.Time) (int, error) {
	cut := now.Add(-c.cfg.After)
	if c.from.IsZero() {
		var oldest *time.Time
		if err := c.pool.QueryRow(ctx, oldestSQL).Scan(&oldest); err != nil {
			return 0, fmt.Errorf("reconcile: closer: oldest partition: %w", err)
		}
		if oldest == nil {
			return 0, nil // no partition, no row
		}
		c.from, c.pending, c.passStart, c.inserted = *oldest, time.Time{}, now, time.Time{}
	}
	if !c.inserted.IsZero() {
		var first *time.Time
		if err := c.pool.QueryRow(ctx, insertedSQL, c.inserted.Add(-insertedSlack)).Scan(&first, &c.inserted); err != nil {
			return 0, fmt.Errorf("reconcile: closer: rows written since the last pass: %w", err)
		}
		if first != nil && (c.pending.IsZero() || first.Before(c.pending)) {
			c.pending = *first
		}
	} else if err := c.pool.QueryRow(ctx, `SELECT statement_timestamp()`).Scan(&c.inserted); err != nil {
		// A pass from the oldest month reads every row: new ones are
		// looked for from its start on.
		return 0, fmt.Errorf("reconcile: closer: clock: %w", err)
	}
	closed := 0
	for stmts := 0; stmts < c.cfg.BatchesPerTick && c.from.Before(cut); stmts++ {
		hi := nextMonth(c.from)
		if hi.After(cut) {
			hi = cut
		}
		var n int
		if err := c.pool.QueryRow(ctx, closeSQL, c.from, hi, cut, c.cfg.BatchRows, now, c.cfg.Name, MaxWindow).Scan(&n); err != nil {
			return closed, fmt.Errorf("reconcile: closer: close rows of windows from %v: %w", c.from, err)
		}
		closed += n
		if c.cfg.Metrics != nil {
			c.cfg.Metrics.Closed.Add(float64(n))
		}
		if n == c.cfg.BatchRows {
			continue // more due rows in [from, hi)
		}
		stmts++
		var open *time.Time
		if err := c.pool.QueryRow(ctx, openSQL, c.from, hi).Scan(&open); err != nil {
			return closed, fmt.Errorf("reconcile: closer: open rows of windows from %v: %w", c.from, err)
		}
		if open != nil && (c.pending.IsZero() || open.Before(c.pending)) {
			c.pending = *open
		}
		c.from = hi
	}
	if !c.from.Before(cut) {
		// The pass reached now − After: the next resumes at the earliest
		// row it left open, or starts again from the oldest month.
		if !c.pending.IsZero() && c.pending.Before(c.from) {
			c.from = c.pending
		}
		c.pending = time.Time{}
		if now.Sub(c.passStart) >= c.cfg.Rescan {
			c.from = time.Time{}
		}
	}
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.LastPass.Set(float64(now.Unix()))
	}
	return closed, nil
}

// nextMonth is the first instant of the UTC month after t's: the upper
// bound of t's month partition.
func nextMonth(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}
