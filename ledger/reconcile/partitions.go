package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/ledger"
)

// MonthsError is returned by Writer.Write when it left the rows of some
// months unwritten: months detached by retention (usage_detached_months),
// whose reports the Reconciler dead-letters (ReasonDetached), and months
// whose partition this Write could not create because it had already
// created WriterConfig.MaxNewPartitions, whose reports wait for a later
// batch. Every other row of the batch was written. Months are first
// instants of UTC months.
type MonthsError struct {
	Detached []time.Time
	Waiting  []time.Time
}

func (e *MonthsError) Error() string {
	var b strings.Builder
	b.WriteString("reconcile: rows not written:")
	if len(e.Detached) > 0 {
		fmt.Fprintf(&b, " %d detached month(s) %s;", len(e.Detached), monthList(e.Detached))
	}
	if len(e.Waiting) > 0 {
		fmt.Fprintf(&b, " %d month(s) over the batch's partition limit %s;", len(e.Waiting), monthList(e.Waiting))
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Reason is why the rows of month m were not written, "" when they were.
func (e *MonthsError) Reason(m time.Time) Reason {
	switch {
	case slices.ContainsFunc(e.Detached, m.Equal):
		return ReasonDetached
	case slices.ContainsFunc(e.Waiting, m.Equal):
		return reasonWaiting
	}
	return ""
}

// reasonWaiting marks rows left for a later batch; never a dead letter.
const reasonWaiting Reason = "waiting"

func monthList(ms []time.Time) string {
	const shown = 5
	out := make([]string, 0, min(len(ms), shown)+1)
	for i, m := range ms {
		if i == shown {
			out = append(out, "…")
			break
		}
		out = append(out, m.Format("2006-01"))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// monthOf is the first instant of the UTC month t falls in.
func monthOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// knownMonths selects those of $1's months that retention detached, and
// those that have a partition (created since the rows were refused, e.g.
// by another writer or an earlier Write of this batch). Partitions are
// found by the name usage_ensure_partition gives them, from the catalog
// alone: reading their bounds (usage_partitions, pg_get_expr) locks every
// partition, and one month held by a maintenance statement then stalled
// every batch that needed a new month (issue 37, item 0).
const knownMonths = `SELECT month, true FROM usage_detached_months WHERE month = ANY($1::timestamptz[])
UNION ALL
SELECT m, false FROM unnest($1::timestamptz[]) AS m
WHERE EXISTS (SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = 'usage_reports'::regclass
    AND c.relname = 'usage_reports_p' || to_char(m AT TIME ZONE 'UTC', 'YYYYMM')
      || CASE WHEN m < '0001-01-01 00:00:00+00' THEN '_bc' ELSE '' END)`

// ensureMonths creates the partitions of months (first instants of UTC
// months) that rows of a batch found missing, in a transaction of its own,
// except for months retention detached and for months beyond the first
// MaxNewPartitions (newest first: current reports matter more than late
// ones). It returns the months whose rows can now be written, and a
// *MonthsError naming the others (nil when there are none).
//
// Creating a partition takes several locks until its transaction ends; a
// batch of 2,000 months created at once ran Postgres out of lock slots
// ("out of shared memory", 53200, a transient error), so the batch was
// retried for ever and nothing behind it was written.
func (w *Writer) ensureMonths(ctx context.Context, months []time.Time) ([]time.Time, *MonthsError, error) {
	rows, err := w.pool.Query(ctx, knownMonths, months)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: read detached months: %w", err)
	}
	var merr MonthsError
	var ready []time.Time
	for rows.Next() {
		var m time.Time
		var detached bool
		if err := rows.Scan(&m, &detached); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("reconcile: read detached months: %w", err)
		}
		if detached {
			merr.Detached = append(merr.Detached, m.UTC())
		} else {
			ready = append(ready, m.UTC())
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("reconcile: read detached months: %w", err)
	}
	create := slices.DeleteFunc(slices.Clone(months), func(m time.Time) bool {
		return slices.ContainsFunc(merr.Detached, m.Equal) || slices.ContainsFunc(ready, m.Equal)
	})
	slices.SortFunc(create, func(a, b time.Time) int { return b.Compare(a) })
	if len(create) > w.cfg.MaxNewPartitions {
		merr.Waiting = create[w.cfg.MaxNewPartitions:]
		create = create[:w.cfg.MaxNewPartitions]
	}
	if len(create) > 0 {
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", w.cfg.LockTimeout.Milliseconds())); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, ensurePartitions, create)
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("reconcile: create partitions: %w", err)
		}
	}
	ready = append(ready, create...)
	if len(merr.Detached) == 0 && len(merr.Waiting) == 0 {
		return ready, nil, nil
	}
	return ready, &merr, nil
}

// keepMonths returns the parts with only the rows whose window starts in
// one of months, dropping parts left empty.
func keepMonths(parts [][]ledger.Report, months []time.Time) [][]ledger.Report {
	out := parts[:0]
	for _, p := range parts {
		kept := make([]ledger.Report, 0, len(p))
		for _, r := range p {
			if slices.ContainsFunc(months, monthOf(r.WindowStart).Equal) {
				kept = append(kept, r)
			}
		}
		if len(kept) > 0 {
			out = append(out, kept)
		}
	}
	return out
}
