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
const sinkSQL = `SELECT sink, period_start, sum(acked_spent)::bigint, count(*) FILTER (WHERE status <> 'sent')::bigint
FROM billing_sink_events
WHERE granularity = $3 AND period_start >= $1 AND period_start < $2 AND ($4 = '' OR sink = $4)
GROUP BY 1, 2`

// Querier is the part of a pgx pool or connection that Report uses.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Report compares the ledger's periods in [from, to) with what sink (""
// every sink with events in the range) acknowledged, a row per sink and
// period. A period is closed for a key once it ended before now and every
// final report is in. The ledger's figures are the export's
// (export.Exporter, page by page, with its default Config), so they are
// the billed figures the sinks are sent.
func Report(ctx context.Context, db Querier, sink string, g export.Granularity, from, to, now time.Time) ([]ReportRow, error) {
	g, err := export.ParseGranularity(string(g))
	if err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	ex, err := export.New(db, export.DefaultConfig())
	if err != nil {
		return nil, fmt.Errorf("sink: report: %w", err)
	}
	type ledgerSums struct{ total, closed int64 }
	ledger := make(map[time.Time]*ledgerSums)
	err = ex.Export(ctx, export.Query{From: from, To: to, Granularity: g, Now: now}, func(rows []export.Row) error {
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
