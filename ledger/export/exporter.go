package export

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// the lower key bound, $4 the most keys, $5 the granularity; %[1]s the
// lower bound's operator (> or >=), %[2]s the prefix's upper bound, if
// any, %[3]s and %[4]s the stored carries' condition and CTEs (carryCTEs).
// The keys of a page are contiguous, so the rows are read by a key range
// on the primary key (key, window_start, process_id) of each month
// partition before to: the periods before from are read too, for the
// carry-over (Row), which runs over each key's whole history in the
// ledger, or from its stored carry on (Query.Carry), whose cumulative net,
// low and billed start the running ones below.
//
// Sums are numeric and saturated at ±(2^63−1) (usage_saturate, migration
// 011): a key whose figures pass that bound (the ledger's overflow guard)
// gets saturated figures and Complete false, so that no sink bills it,
// rather than failing the page for every key.
//
// The carry is computed in closed form: with N(p) the key's cumulative
// net up to period p, L(p) = min(0, min of N(q) for q ≤ p) the refund
// that found nothing billed before it to credit (minus Uncredited so far),
// S(p) = N(p) − L(p) ≥ 0 the cumulative net floored at zero, and
// B(p) = max of S(q) for q ≤ p the cumulative billed (billing never goes
// back), the credit carried into p is B(p−1) − S(p−1) ≤ B(p−1) and p's
// Uncredited L(p−1) − L(p); Carry turns the credit and p's net plus
// Uncredited into Billed and CarriedOut (Billed = B(p) − B(p−1),
// CarriedOut = B(p) − S(p)).
const pageSQL = `WITH page AS (
    SELECT DISTINCT key FROM usage_reports
    WHERE window_start >= $1 AND window_start < $2 AND key %[1]s $3 %[2]s
    ORDER BY key LIMIT $4),
%[4]s,
kp AS (
    SELECT key, date_trunc($5, window_start, 'UTC') AS period,
           sum(spent) AS spent, sum(rejected) AS rejected, sum(degraded) AS degraded,
           sum(refunded) AS refunded, sum(charged) AS charged,
           sum(spent) + sum(charged) - sum(refunded) AS net,
           count(DISTINCT window_start) AS windows, bool_and(final) AS final,
           count(DISTINCT window_start) FILTER (WHERE closed_at IS NOT NULL) AS closed
    FROM usage_reports
    WHERE window_start < $2 %[3]s
      AND key >= (SELECT min(key) FROM page) AND key <= (SELECT max(key) FROM page)
    GROUP BY 1, 2),
cum AS (
    SELECT kp.*, coalesce(c.low, 0) AS c_low, coalesce(c.cum_billed, 0) AS c_billed,
           coalesce(c.cum_net, 0) + sum(net) OVER (PARTITION BY kp.key ORDER BY period ROWS UNBOUNDED PRECEDING) AS cum_net
    FROM kp LEFT JOIN carry c ON c.key = kp.key),
low AS (
    SELECT *, least(c_low, min(cum_net) OVER (PARTITION BY key ORDER BY period ROWS UNBOUNDED PRECEDING)) AS low
    FROM cum),
billed AS (
    SELECT *, greatest(c_billed, max(cum_net - low) OVER (PARTITION BY key ORDER BY period ROWS UNBOUNDED PRECEDING)) AS cum_billed
    FROM low),
before AS (
    SELECT *, cum_net - net AS before_net,
           coalesce(lag(low) OVER (PARTITION BY key ORDER BY period), c_low) AS before_low,
           coalesce(lag(cum_billed) OVER (PARTITION BY key ORDER BY period), c_billed) AS before_billed
    FROM billed),
carried AS (
    SELECT *, before_billed - (before_net - before_low) AS carried_in, before_low - low AS uncredited
    FROM before)
SELECT key, period, usage_saturate(spent), usage_saturate(rejected), usage_saturate(degraded), windows::bigint,
       final AND NOT usage_overflows(spent, rejected, degraded, refunded, charged, net, carried_in, uncredited),
       usage_saturate(refunded), usage_saturate(charged), usage_saturate(net), usage_saturate(carried_in),
       usage_saturate(uncredited), closed::bigint,
       usage_saturate(before_net), usage_saturate(before_low), usage_saturate(before_billed),
       usage_overflows(before_net, before_low, before_billed)
FROM carried
WHERE period >= $1 AND key IN (SELECT key FROM page)
ORDER BY 1, 2`

// planPageSQL is pageSQL on the plan calendar (CalendarPlan): each key's
// periods are cut on its plan's zone and anchor day (quota_key_plan, as
// quota_period_bounds cuts them). $1 from, $2 to, $3 the lower key bound,
// $4 the most keys, $5 to + the longest period (the last period that
// starts before to ends before it); %[1]s the lower bound's operator,
// %[2]s the prefix's bounds, %[3]s the local unit that windows are first
// summed by ('hour', or 'day' for days and months), %[4]s the CTEs from
// local to kp (planHour, planDay, planMonth), %[5]s and %[6]s the frozen
// periods' join and bounds, %[7]s and %[8]s the stored carries' CTEs and
// condition (carryCTEs). A carry starts at a period start of the key's
// calendar, so every window after it falls in a period after it.
//
// Its cost stays close to pageSQL's: one key range on the primary key in
// each month partition before $5, one aggregate per window row (its local
// time and offset by AT TIME ZONE, no PL/pgSQL), and the calendar's
// functions called per plan and local month (month starts) or per
// exported row (day bounds), never per window. A window's zone comes from
// a jsonb object of the page's keys (a binary search), not a join: with
// the planner's estimate of the key range (InitPlan bounds) a join hashed
// the window rows and spilled to disk. Windows are first summed
// by (key, local day or hour, UTC offset): within one such group every
// window is in the same period, because a period boundary is a local
// midnight (or the instant the clock jumps over it) and an offset change
// splits the group; so the month of a group is decided by its first
// window against its local month's start, exactly as period.Calendar
// decides it for each window.
//
// A page's keys are those with a window in [$1, $5); a key whose windows
// there all fall in periods that start outside [$1, $2) has no row, so the
// query ends with one more row, with a NULL period: the page's last key
// (NULL for an empty page), where the next page starts.
const planPageSQL = `WITH page AS (
    SELECT DISTINCT key FROM usage_reports
    WHERE window_start >= $1 AND window_start < $5 AND key %[1]s $3 %[2]s
    ORDER BY key LIMIT $4),
cal AS MATERIALIZED (
    SELECT p.key, coalesce(nullif(kp.time_zone, ''), 'UTC') AS zone, kp.anchor_day
    FROM page p CROSS JOIN LATERAL quota_key_plan(p.key) kp),
zones AS MATERIALIZED (
    SELECT jsonb_object_agg(key, zone) AS zone FROM cal),
%[7]s,
sums AS (
    SELECT r.key, date_trunc(%[3]s, l.lt) AS lt,
           extract(epoch FROM l.lt - (r.window_start AT TIME ZONE 'UTC'))::bigint AS off, fz.seg, fz.inside,
           min(r.window_start) AS first,
           sum(r.spent) AS spent, sum(r.rejected) AS rejected, sum(r.degraded) AS degraded,
           sum(r.refunded) AS refunded, sum(r.charged) AS charged,
           count(DISTINCT r.window_start) AS windows, bool_and(r.final) AS final,
           count(DISTINCT r.window_start) FILTER (WHERE r.closed_at IS NOT NULL) AS closed
    FROM usage_reports r
    CROSS JOIN LATERAL (SELECT r.window_start AT TIME ZONE ((SELECT zone FROM zones) ->> r.key) AS lt) l
    %[5]s
    WHERE r.window_start < $5 %[8]s
      AND r.key >= (SELECT min(key) FROM page) AND r.key <= (SELECT max(key) FROM page)
      AND (SELECT zone FROM zones) ? r.key
    GROUP BY 1, 2, 3, fz.seg, fz.inside),
local AS (
    SELECT s.*, c.zone, c.anchor_day FROM sums s JOIN cal c ON c.key = s.key),
%[4]s,
kp AS (
    SELECT key, ord, ps, pe,
           sum(spent) AS spent, sum(rejected) AS rejected, sum(degraded) AS degraded,
           sum(refunded) AS refunded, sum(charged) AS charged, sum(windows) AS windows, bool_and(final) AS final,
           sum(closed) AS closed
    FROM (SELECT kc.*, b.ord, b.ps, b.pe
          FROM kc
          %[6]s
          CROSS JOIN LATERAL (
              SELECT CASE WHEN kc.inside THEN kc.seg ELSE greatest(kc.est, f.fe) END AS ord,
                     CASE WHEN kc.inside THEN kc.seg WHEN kc.cps IS NULL THEN NULL ELSE greatest(kc.cps, f.fe) END AS ps,
                     CASE WHEN kc.inside THEN f.fe WHEN kc.cpe IS NULL THEN NULL ELSE least(kc.cpe, f.nx) END AS pe) b) x
    GROUP BY 1, 2, 3, 4),
cum AS (
    SELECT kp.*, spent + charged - refunded AS net, coalesce(c.low, 0) AS c_low, coalesce(c.cum_billed, 0) AS c_billed,
           coalesce(c.cum_net, 0)
           + sum(spent + charged - refunded) OVER (PARTITION BY kp.key ORDER BY ord ROWS UNBOUNDED PRECEDING) AS cum_net
    FROM kp LEFT JOIN carry c ON c.key = kp.key),
low AS (
    SELECT *, least(c_low, min(cum_net) OVER (PARTITION BY key ORDER BY ord ROWS UNBOUNDED PRECEDING)) AS low
    FROM cum),
billed AS (
    SELECT *, greatest(c_billed, max(cum_net - low) OVER (PARTITION BY key ORDER BY ord ROWS UNBOUNDED PRECEDING)) AS cum_billed
    FROM low),
before AS (
    SELECT *, cum_net - net AS before_net,
           coalesce(lag(low) OVER (PARTITION BY key ORDER BY ord), c_low) AS before_low,
           coalesce(lag(cum_billed) OVER (PARTITION BY key ORDER BY ord), c_billed) AS before_billed
    FROM billed),
carried AS (
    SELECT *, before_billed - (before_net - before_low) AS carried_in, before_low - low AS uncredited
    FROM before)
SELECT key, ps, pe, usage_saturate(spent), usage_saturate(rejected), usage_saturate(degraded), windows::bigint,
       final AND NOT usage_overflows(spent, rejected, degraded, refunded, charged, net, carried_in, uncredited),
       usage_saturate(refunded), usage_saturate(charged), usage_saturate(net), usage_saturate(carried_in),
       usage_saturate(uncredited), closed::bigint,
       usage_saturate(before_net), usage_saturate(before_low), usage_saturate(before_billed),
       usage_overflows(before_net, before_low, before_billed)
FROM carried
WHERE ps >= $1 AND ps < $2
UNION ALL
SELECT max(key), NULL, NULL, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, false FROM page
ORDER BY 1, 2 NULLS LAST`

// The CTEs that give a page query each key's stored carry (Query.Carry),
// and the condition that reads only the key's windows from its carry on.
// carry is the carry with the latest valid_from at or before From, if
// any (billing_sink_carries, migration 021); ats the carries' starts by
// key (a jsonb object, as planPageSQL's zones: a binary search per
// window, not a join) and lb the earliest of them, '-infinity' when a key
// of the page has none: lb bounds each partition's index scan and prunes
// the month partitions before it, the per-key start then drops the
// windows a key's carry already sums. %[1]d, %[2]d, %[3]d: the sink's,
// the granularity's and the calendar's parameters.
const (
	carryCTEs = `carry AS MATERIALIZED (
    SELECT DISTINCT ON (c.key) c.key, c.carried_at AS at, c.cum_net, c.low, c.cum_billed
    FROM billing_sink_carries c
    WHERE c.sink = $%[1]d AND c.granularity = $%[2]d AND c.calendar = $%[3]d AND c.valid_from <= $1
      AND c.key IN (SELECT key FROM page)
    ORDER BY c.key, c.valid_from DESC),
ats AS MATERIALIZED (
    SELECT jsonb_object_agg(key, at) AS at,
           CASE WHEN count(*) < (SELECT count(*) FROM page) THEN '-infinity' ELSE min(at) END AS lb
    FROM carry)`
	carryCond = `AND window_start >= (SELECT lb FROM ats)
      AND window_start >= coalesce(((SELECT at FROM ats) ->> key)::timestamptz, '-infinity')`
	// Without Query.Carry every key starts from nothing: its first report.
	noCarryCTEs = `carry AS (
    SELECT NULL::text AS key, NULL::timestamptz AS at, NULL::bigint AS cum_net, NULL::bigint AS low,
           NULL::bigint AS cum_billed
    WHERE false)`
)

// The CTEs of planPageSQL from local to kp: each key's periods, ordered
// by ord, their bounds [ps, pe) (NULL for days far from [from, to)) and
// their sums, for one granularity.
const (
	// planHour: the zone's clock hour, from the window's own offset
	// (period.Calendar's Hour).
	planHour = `kc AS (
    SELECT key, (lt - make_interval(secs => off)) AT TIME ZONE 'UTC' AS est,
           (lt - make_interval(secs => off)) AT TIME ZONE 'UTC' AS cps,
           (lt - make_interval(secs => off)) AT TIME ZONE 'UTC' + interval '1 hour' AS cpe, seg, inside,
           sum(spent) AS spent, sum(rejected) AS rejected, sum(degraded) AS degraded,
           sum(refunded) AS refunded, sum(charged) AS charged, sum(windows) AS windows, bool_and(final) AS final,
           sum(closed) AS closed
    FROM local GROUP BY 1, 2, 3, 4, 5, 6)`
	// planDay: the local date; its bounds (quota_midnight) are computed
	// only for the days that may start in [from, to).
	planDay = `days AS (
    SELECT key, zone, lt::date AS day, seg, inside,
           sum(spent) AS spent, sum(rejected) AS rejected, sum(degraded) AS degraded,
           sum(refunded) AS refunded, sum(charged) AS charged, sum(windows) AS windows, bool_and(final) AS final,
           sum(closed) AS closed
    FROM local GROUP BY 1, 2, 3, 4, 5),
kc AS (
    SELECT d.key, coalesce(b.ps, d.day::timestamp AT TIME ZONE d.zone) AS est, b.ps AS cps, b.pe AS cpe, d.seg, d.inside,
           d.spent, d.rejected, d.degraded, d.refunded, d.charged, d.windows, d.final, d.closed
    FROM days d
    CROSS JOIN LATERAL (
        SELECT CASE WHEN d.day BETWEEN ($1 AT TIME ZONE d.zone)::date - 1 AND ($2 AT TIME ZONE d.zone)::date + 1
                    THEN quota_midnight(d.day, d.zone) END AS ps,
               CASE WHEN d.day BETWEEN ($1 AT TIME ZONE d.zone)::date - 1 AND ($2 AT TIME ZONE d.zone)::date + 1
                    THEN quota_midnight(d.day + 1, d.zone) END AS pe) b)`
	// planMonth: the month starts of each plan calendar and local month
	// the page's windows fall in, once each; a group before its local
	// month's start (the anchor day's midnight) is in the month before.
	planMonth = `months AS MATERIALIZED (
    SELECT zone, anchor_day, lm,
           quota_month_start(y, m - 1, anchor_day, zone) AS prev,
           quota_month_start(y, m, anchor_day, zone) AS this,
           quota_month_start(y, m + 1, anchor_day, zone) AS next
    FROM (SELECT DISTINCT zone, anchor_day, date_trunc('month', lt)::date AS lm FROM local) d
    CROSS JOIN LATERAL (SELECT extract(year FROM lm)::int AS y, extract(month FROM lm)::int AS m) ym),
kc AS (
    SELECT l.key, CASE WHEN l.first >= mo.this THEN mo.this ELSE mo.prev END AS est,
           CASE WHEN l.first >= mo.this THEN mo.this ELSE mo.prev END AS cps,
           CASE WHEN l.first >= mo.this THEN mo.next ELSE mo.this END AS cpe, l.seg, l.inside,
           sum(l.spent) AS spent, sum(l.rejected) AS rejected, sum(l.degraded) AS degraded,
           sum(l.refunded) AS refunded, sum(l.charged) AS charged, sum(l.windows) AS windows, bool_and(l.final) AS final,
           sum(l.closed) AS closed
    FROM local l
    JOIN months mo ON mo.zone = l.zone AND mo.anchor_day = l.anchor_day AND mo.lm = date_trunc('month', l.lt)::date
    GROUP BY 1, 2, 3, 4, 5, 6)`
)

// The join of planPageSQL that finds, for each window, the latest period
// of the key that Query.Frozen recorded starting at or before it (seg)
// and whether the window is inside it: one backward probe of
// billing_sink_events' primary key per window. Without Query.Frozen,
// none.
const (
	frozenJoin = `LEFT JOIN LATERAL (
        SELECT e.period_start AS seg, r.window_start < e.period_end AS inside
        FROM billing_sink_events e
        WHERE e.sink = $6 AND e.key = r.key AND e.granularity = $7 AND e.period_start <= r.window_start
        ORDER BY e.period_start DESC LIMIT 1) fz ON true`
	noFrozenJoin = `CROSS JOIN LATERAL (SELECT NULL::timestamptz AS seg, false AS inside) fz`
	// frozenBounds finds, for each group of windows, the end of the frozen
	// period it lies in or follows (fe) and the start of the key's next
	// frozen period (nx): a period cut by the plan calendar is clipped to
	// [fe, nx).
	frozenBounds = `CROSS JOIN LATERAL (
              SELECT (SELECT e.period_end FROM billing_sink_events e
                      WHERE e.sink = $6 AND e.key = kc.key AND e.period_start = kc.seg AND e.granularity = $7) AS fe,
                     (SELECT min(e.period_start) FROM billing_sink_events e
                      WHERE e.sink = $6 AND e.key = kc.key AND e.granularity = $7
                        AND e.period_start > coalesce(kc.seg, '-infinity')) AS nx) f`
	noFrozenBounds = `CROSS JOIN LATERAL (SELECT NULL::timestamptz AS fe, NULL::timestamptz AS nx) f`
)

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
	q.Calendar, _ = ParseCalendar(string(q.Calendar))
	periods := q.Granularity.periods(q.From, q.To)
	if q.Calendar == CalendarPlan {
		periods = q.Granularity.planPeriods(q.From, q.To)
	}
	keysPerPage := max(1, e.cfg.PageRows/max(1, periods))
	lower, inclusive := q.After, false
	if !q.Cursor.IsZero() {
		lower, inclusive = q.Cursor.Key, true
	}
	buf := make([]Row, 0, min(e.cfg.PageRows, 1024))
	for first := true; ; first = false {
		var last string
		var err error
		buf, last, err = e.page(ctx, q, lower, inclusive, keysPerPage, buf[:0])
		if err != nil {
			return err
		}
		if last == "" {
			return nil // no key after lower
		}
		if first && !q.Cursor.IsZero() {
			buf = dropThrough(buf, q.Cursor)
		}
		// A page may have no rows: the cursor's key had none after the
		// cursor, or (plan calendar) its keys' periods start outside
		// [From, To). Go on from its last key.
		if len(buf) > 0 {
			if err := page(buf); err != nil {
				return err
			}
		}
		lower, inclusive = last, false
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

// page runs one page's query into buf, and returns the page's last key
// ("" when no key is left).
func (e *Exporter) page(ctx context.Context, q Query, lower string, inclusive bool, keys int, buf []Row) ([]Row, string, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout)
	defer cancel()
	op, upper := ">", ""
	if inclusive {
		op = ">="
	}
	var sql string
	var args []any
	// carry appends the stored carries' parameters to args and returns
	// the CTEs that read them and the condition on the page's rows (col
	// the rows' key column).
	carry := func(col string) (ctes, cond string) {
		if q.Carry == "" {
			return noCarryCTEs, ""
		}
		args = append(args, q.Carry, string(q.Granularity), string(q.Calendar))
		n := len(args) - 2
		return fmt.Sprintf(carryCTEs, n, n+1, n+2), strings.ReplaceAll(carryCond, "key", col)
	}
	if q.Calendar == CalendarPlan {
		trunc, kp := "'day'", planDay
		switch q.Granularity {
		case Hour:
			trunc, kp = "'hour'", planHour
		case Month:
			kp = planMonth
		}
		args = []any{q.From, q.To, lower, keys, q.To.Add(q.Granularity.longest())}
		join, bounds := noFrozenJoin, noFrozenBounds
		if q.Frozen != "" {
			args = append(args, q.Frozen, string(q.Granularity))
			join, bounds = frozenJoin, frozenBounds
		}
		ctes, cond := carry("r.key")
		upper = prefixBounds(q.Prefix, &args)
		sql = fmt.Sprintf(planPageSQL, op, upper, trunc, kp, join, bounds, ctes, strings.ReplaceAll(cond, "window_start", "r.window_start"))
		if q.Keys != nil {
			sql = onlyKeys(sql, "$5", "r.key", op, upper, q.Keys, &args)
		}
	} else {
		args = []any{q.From, q.To, lower, keys, string(q.Granularity)}
		ctes, cond := carry("key")
		upper = prefixBounds(q.Prefix, &args)
		sql = fmt.Sprintf(pageSQL, op, upper, cond, ctes)
		if q.Keys != nil {
			sql = onlyKeys(sql, "$2", "key", op, upper, q.Keys, &args)
		}
	}
	rows, err := e.db.Query(ctx, sql, args...)
	if err != nil {
		return buf, "", wrapErr(err, e.cfg.StatementTimeout)
	}
	defer rows.Close()
	last := ""
	for rows.Next() {
		var r Row
		var key *string
		var start, end *time.Time
		var final bool
		var overflows bool
		dst := []any{&key, &start, &end, &r.Allowed, &r.Rejected, &r.Degraded, &r.Windows, &final,
			&r.Refunded, &r.Charged, &r.Net, &r.CarriedIn, &r.Uncredited, &r.ClosedByReconciler,
			&r.Before.CumNet, &r.Before.Low, &r.Before.CumBilled, &overflows}
		if q.Calendar != CalendarPlan {
			dst = append(dst[:2], dst[3:]...) // pageSQL has no period end
		}
		if err := rows.Scan(dst...); err != nil {
			return buf, "", fmt.Errorf("export: scan: %w", err)
		}
		if start == nil { // planPageSQL's last row: the page's last key
			if key != nil {
				last = *key
			}
			continue
		}
		r.Key = *key
		r.Before.Exact = !overflows
		// Net + Uncredited ≤ 0 when Uncredited > 0: no overflow.
		r.Billed, r.CarriedOut = Carry(r.CarriedIn, r.Net+r.Uncredited)
		r.PeriodStart = start.UTC()
		if end != nil {
			r.PeriodEnd = end.UTC()
		} else {
			r.PeriodEnd = q.Granularity.Next(r.PeriodStart)
		}
		r.Complete = final && !r.PeriodEnd.After(q.Now)
		buf = append(buf, r)
		if q.Calendar != CalendarPlan {
			last = r.Key // every key of a pageSQL page has a row
		}
	}
	if err := rows.Err(); err != nil {
		return buf, "", wrapErr(err, e.cfg.StatementTimeout)
	}
	return buf, last, nil
}

// onlyKeys rewrites a page query (pageSQL or planPageSQL, formatted) to
// read only keys: its page takes the next of them that have a window in
// [$1, end) (one probe of the primary key each, not a scan of the range's
// windows), and its sums read the page's keys alone, not every key
// between its first and last (col is the sums' key column). It appends
// the keys' parameter to args.
func onlyKeys(sql, end, col, op, upper string, keys []string, args *[]any) string {
	*args = append(*args, keys)
	n := len(*args)
	page := fmt.Sprintf(`SELECT k.key FROM (SELECT DISTINCT unnest($%d::text[]) AS key) k
    WHERE k.key %s $3 %s
      AND EXISTS (SELECT 1 FROM usage_reports x WHERE x.key = k.key AND x.window_start >= $1 AND x.window_start < %s)
    ORDER BY 1 LIMIT $4`, n, op, strings.ReplaceAll(upper, "key", "k.key"), end)
	start := strings.Index(sql, "SELECT DISTINCT key FROM usage_reports")
	stop := strings.Index(sql, "LIMIT $4") + len("LIMIT $4")
	sql = sql[:start] + page + sql[stop:]
	bound := col + " <= (SELECT max(key) FROM page)"
	return strings.Replace(sql, bound, fmt.Sprintf("%s AND %s = ANY($%d::text[])", bound, col, n), 1)
}

// prefixBounds returns the page query's condition for prefix ("" none),
// appending its parameter to args.
func prefixBounds(prefix string, args *[]any) string {
	if prefix == "" {
		return ""
	}
	// key >= prefix starts the scan at the prefix; there is no upper
	// bound that holds in every collation, so the last page of a prefix
	// reads on to the end of the key range.
	*args = append(*args, prefix)
	n := len(*args)
	return fmt.Sprintf("AND key >= $%d AND starts_with(key, $%d)", n, n)
}

func wrapErr(err error, timeout time.Duration) error {
	var pgErr *pgconn.PgError
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pgErr) && pgErr.Code == "57014") {
		return fmt.Errorf("%w (%v per page): %w", ErrTimeout, timeout, err)
	}
	return fmt.Errorf("export: query: %w", err)
}
