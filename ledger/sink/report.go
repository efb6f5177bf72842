package sink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/ledger/export"
)

// ReportRow compares the ledger with one sink for one period. Cost units.
type ReportRow struct {
	Sink        string
	PeriodStart time.Time
	// Ledger is every key's spent in the period; Closed the part in
	// complete (key, period)s, which is what should have been sent.
	Ledger, Closed int64
	// Acked is what the sink acknowledged for the period.
	Acked int64
	// Unacked counts keys whose latest event the sink has not
	// acknowledged.
	Unacked int64
}

// Difference is Closed − Acked: positive while the sink is missing usage
// (unsent or refused periods, pending corrections).
func (r ReportRow) Difference() int64 { return r.Closed - r.Acked }

// reportSQL: $1 from, $2 to, $3 granularity, $4 now, $5 one sink or ”
// for every sink that has rows in the range.
const reportSQL = `WITH kp AS (
    SELECT key, date_trunc($3, window_start, 'UTC') AS p, sum(spent)::bigint AS s, bool_and(final) AS f
    FROM usage_reports WHERE window_start >= $1 AND window_start < $2 GROUP BY 1, 2),
l AS (
    SELECT p, sum(s)::bigint AS total,
           coalesce(sum(s) FILTER (WHERE f AND p + ('1 ' || $3)::interval <= $4), 0)::bigint AS closed
    FROM kp GROUP BY p),
s AS (
    SELECT sink, period_start AS p, sum(acked_spent)::bigint AS acked,
           count(*) FILTER (WHERE status <> 'sent')::bigint AS unacked
    FROM billing_sink_events
    WHERE granularity = $3 AND period_start >= $1 AND period_start < $2 AND ($5 = '' OR sink = $5)
    GROUP BY 1, 2),
sinks AS (SELECT sink FROM s UNION SELECT $5 WHERE $5 <> ''),
periods AS (SELECT p FROM l UNION SELECT p FROM s)
SELECT sinks.sink, periods.p, coalesce(l.total, 0), coalesce(l.closed, 0), coalesce(s.acked, 0), coalesce(s.unacked, 0)
FROM sinks CROSS JOIN periods
LEFT JOIN l ON l.p = periods.p
LEFT JOIN s ON s.sink = sinks.sink AND s.p = periods.p
ORDER BY 1, 2`

// Querier is the part of a pgx pool or connection that Report uses.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Report compares the ledger's periods in [from, to) with what sink (""
// every sink with events in the range) acknowledged, a row per sink and
// period. A period is closed for a key once it ended before now and every
// final report is in.
func Report(ctx context.Context, db Querier, sink string, g export.Granularity, from, to, now time.Time) ([]ReportRow, error) {
	g, err := export.ParseGranularity(string(g))
	if err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	rows, err := db.Query(ctx, reportSQL, from, to, string(g), now, sink)
	if err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	defer rows.Close()
	var out []ReportRow
	for rows.Next() {
		var r ReportRow
		if err := rows.Scan(&r.Sink, &r.PeriodStart, &r.Ledger, &r.Closed, &r.Acked, &r.Unacked); err != nil {
			return nil, fmt.Errorf("sink: report: %w", err)
		}
		r.PeriodStart = r.PeriodStart.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	return out, nil
}

// difference is the sum of Difference over the run's sink and range.
func (p *Publisher) difference(ctx context.Context, from, to, now time.Time) (int64, error) {
	rows, err := Report(ctx, p.db, p.cfg.Sink, p.cfg.Granularity, from, to, now)
	if err != nil {
		return 0, err
	}
	var d int64
	for _, r := range rows {
		d += r.Difference()
	}
	return d, nil
}
