package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/ledger/export"
)

// ReportRow compares the ledger with one sink for one period. Cost units.
type ReportRow struct {
	Sink        string
	PeriodStart time.Time
	// Ledger is every key's billed figure in the period (export.Row.Billed);
	// Closed the part in complete (key, period)s, which is what should
	// have been sent.
	Ledger, Closed int64
	// Acked is what the sink acknowledged for the period.
	Acked int64
	// Unacked counts keys whose latest event the sink has not
	// acknowledged.
	Unacked int64
}

// Difference is Closed − Acked: positive while the sink is missing usage
// (unsent or refused periods, pending corrections), negative while it
// holds more than the ledger bills (a pending correction of a late
// refund).
func (r ReportRow) Difference() int64 { return r.Closed - r.Acked }

// sinkSQL sums what each sink acknowledged per period: $1 from, $2 to, $3
// granularity, $4 one sink or "" for every sink with rows in the range.
const sinkSQL = `SELECT sink, period_start, sum(acked_billed)::bigint, count(*) FILTER (WHERE status <> 'sent')::bigint
FROM billing_sink_events
WHERE granularity = $3 AND period_start >= $1 AND period_start < $2 AND ($4 = '' OR sink = $4)
GROUP BY 1, 2`

// Querier is the part of a pgx pool or connection that Report uses.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Report compares the ledger's periods in [from, to) with what sink (""
// every sink with events in the range) acknowledged, a row per sink and
// period start. cal is the sink's calendar (Config.Calendar; "" UTC): on
// the plan calendar keys' periods start at different instants, a row
// each. A period is closed for a key once it ended before now and every
// final report is in. On the plan calendar the ledger is cut by each
// sink's frozen periods (export.Query.Frozen), a report per sink. The
// ledger's figures are the export's
// (export.Exporter, page by page, with its default Config), so they are
// the billed figures the sinks are sent.
func Report(ctx context.Context, db Querier, sink string, g export.Granularity, cal export.Calendar,
	from, to, now time.Time) ([]ReportRow, error) {
	g, err := export.ParseGranularity(string(g))
	if err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	if cal == export.CalendarPlan && sink == "" {
		// Each sink froze its own periods: a report per sink.
		return reportEach(ctx, db, g, from, to, now)
	}
	type ledgerSums struct{ total, closed int64 }
	ledger := make(map[time.Time]*ledgerSums)
	q := export.Query{From: from, To: to, Granularity: g, Calendar: cal, Now: now, Frozen: sink}
	err = exportLedger(ctx, db, q, func(rows []export.Row) error {
		for i := range rows {
			r := &rows[i]
			l := ledger[r.PeriodStart]
			if l == nil {
				l = &ledgerSums{}
				ledger[r.PeriodStart] = l
			}
			l.total += r.Billed
			if r.Complete {
				l.closed += r.Billed
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sink: report: ledger: %w", err)
	}
	type sinkPeriod struct {
		sink string
		p    time.Time
	}
	acked := make(map[sinkPeriod][2]int64)
	sinks := map[string]bool{}
	if sink != "" {
		sinks[sink] = true
	}
	periods := make(map[time.Time]bool, len(ledger))
	for p := range ledger {
		periods[p] = true
	}
	rows, err := db.Query(ctx, sinkSQL, from, to, string(g), sink)
	if err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var sp sinkPeriod
		var a [2]int64
		if err := rows.Scan(&sp.sink, &sp.p, &a[0], &a[1]); err != nil {
			return nil, fmt.Errorf("sink: report: %w", err)
		}
		sp.p = sp.p.UTC()
		acked[sp], sinks[sp.sink], periods[sp.p] = a, true, true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	var out []ReportRow
	for s := range sinks {
		for p := range periods {
			r := ReportRow{Sink: s, PeriodStart: p}
			if l := ledger[p]; l != nil {
				r.Ledger, r.Closed = l.total, l.closed
			}
			a := acked[sinkPeriod{s, p}]
			r.Acked, r.Unacked = a[0], a[1]
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b ReportRow) int {
		if c := strings.Compare(a.Sink, b.Sink); c != 0 {
			return c
		}
		return a.PeriodStart.Compare(b.PeriodStart)
	})
	return out, nil
}

// reportEach is Report on the plan calendar for every sink with events
// in [from, to), each against the ledger cut by its own frozen periods.
func reportEach(ctx context.Context, db Querier, g export.Granularity, from, to, now time.Time) ([]ReportRow, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT sink FROM billing_sink_events
WHERE granularity = $3 AND period_start >= $1 AND period_start < $2 ORDER BY 1`, from, to, string(g))
	if err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	sinks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	var out []ReportRow
	for _, s := range sinks {
		rs, err := Report(ctx, db, s, g, export.CalendarPlan, from, to, now)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// KeyDifference is one key's period whose billed figure in the ledger
// differs from what the sink acknowledged. Cost units.
type KeyDifference struct {
	Key         string
	PeriodStart time.Time
	// Ledger is the period's billed figure (export.Row.Billed), Acked what
	// the sink acknowledged for it.
	Ledger, Acked int64
	// Complete: the period is closed in the ledger. A period that is not
	// but that the sink holds something for was re-opened (a report
	// arrived after it was sent) or is being sent in slices.
	Complete bool
	// Status is the sink's record of the latest event ("" if none).
	Status string
}

// Difference is Ledger − Acked: positive while the sink misses usage,
// negative while it holds more than the ledger bills.
func (d KeyDifference) Difference() int64 { return d.Ledger - d.Acked }

// KeyDifferences compares, key by key and period by period in [from, to),
// the ledger's billed figure with what sink acknowledged, and returns
// every (key, period) that differs: closed periods, and any period the
// sink holds something for (re-opened ones included). Nothing is summed
// across keys, so one key's surplus cannot hide another's missing usage.
// A period neither closed nor sent is not due yet and is left out. cal is
// the sink's calendar (Config.Calendar; "" UTC).
func KeyDifferences(ctx context.Context, db Querier, sinkName string, g export.Granularity, cal export.Calendar,
	from, to, now time.Time) ([]KeyDifference, error) {
	g, err := export.ParseGranularity(string(g))
	if err != nil {
		return nil, fmt.Errorf("sink: key differences: %w", err)
	}
	var out []KeyDifference
	q := export.Query{From: from, To: to, Granularity: g, Calendar: cal, Now: now, Frozen: sinkName}
	err = exportLedger(ctx, db, q, func(rows []export.Row) error {
		held, err := ackedByPeriod(ctx, db, sinkName, g, pageKeys(rows), from, to)
		if err != nil {
			return err
		}
		out = appendDifferences(out, rows, held)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sink: key differences: %w", err)
	}
	return out, nil
}

// exportLedger reads q's rows from the ledger, page by page, with the
// export's default Config: the billed figures the sinks are sent.
func exportLedger(ctx context.Context, db Querier, q export.Query, page func([]export.Row) error) error {
	ex, err := export.New(db, export.DefaultConfig())
	if err != nil {
		return err
	}
	return exportSpans(ctx, ex, q, page)
}

// appendDifferences appends to out each of rows whose billed figure
// differs from what held says the sink acknowledged: closed periods, and
// any period the sink holds something for.
func appendDifferences(out []KeyDifference, rows []export.Row, held map[periodKey]ackedPeriod) []KeyDifference {
	for i := range rows {
		r := &rows[i]
		a, sent := held[periodKey{r.Key, r.PeriodStart.Unix()}]
		if (!r.Complete && !sent) || r.Billed == a.acked {
			continue
		}
		out = append(out, KeyDifference{Key: r.Key, PeriodStart: r.PeriodStart, Ledger: r.Billed, Acked: a.acked,
			Complete: r.Complete, Status: a.status})
	}
	return out
}

type ackedPeriod struct {
	acked  int64
	status string
}

// ackedByPeriod reads what the sink acknowledged for keys' periods in
// [from, to).
func ackedByPeriod(ctx context.Context, db Querier, sinkName string, g export.Granularity, keys []string,
	from, to time.Time) (map[periodKey]ackedPeriod, error) {
	rows, err := db.Query(ctx, `SELECT key, period_start, acked_billed, status FROM billing_sink_events
WHERE sink = $1 AND granularity = $2 AND key = ANY($3) AND period_start >= $4 AND period_start < $5`,
		sinkName, string(g), keys, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[periodKey]ackedPeriod)
	for rows.Next() {
		var key string
		var start time.Time
		var a ackedPeriod
		if err := rows.Scan(&key, &start, &a.acked, &a.status); err != nil {
			return nil, err
		}
		out[periodKey{key, start.Unix()}] = a
	}
	return out, rows.Err()
}

// keysDiffering counts the distinct keys in ds and sums |Difference|.
func keysDiffering(ds []KeyDifference) (keys int, abs int64) {
	seen := make(map[string]bool)
	for _, d := range ds {
		if !seen[d.Key] {
			seen[d.Key] = true
			keys++
		}
		abs += max(d.Difference(), -d.Difference())
	}
	return keys, abs
}
