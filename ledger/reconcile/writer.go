package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/ledger"
)

// WriteResult counts what one batch did to the ledger.
type WriteResult struct {
	// Rows is the number of distinct (key, window, process) rows in the
	// batch after merging reports for the same row.
	Rows int
	// Inserted rows were new.
	Inserted int
	// Updated rows existed and took newer values (an upsert conflict).
	Updated int
	// Unchanged rows existed with values at least as new (duplicates and
	// reordered reports).
	Unchanged int
}

// Writer upserts usage reports into Postgres table usage_reports. It is safe
// for concurrent use, and any number of Writers (reconcilers) may write to
// one database at once: each batch locks its rows in primary-key order, so
// two batches that share rows wait for each other but never deadlock.
type Writer struct {
	pool *pgxpool.Pool
}

// NewWriter returns a Writer on pool. The schema must be migrated
// (migrations.Migrate).
func NewWriter(pool *pgxpool.Pool) *Writer { return &Writer{pool: pool} }

const createStaging = `CREATE TEMP TABLE IF NOT EXISTS usage_in (
    key text, window_start timestamptz, process_id text, window_end timestamptz,
    region text, spent bigint, leased bigint, rejected bigint, degraded bigint,
    final boolean, seq bigint, sent_at timestamptz, would_reject bigint,
    refunded bigint, charged bigint
) ON COMMIT DELETE ROWS`

// upsert merges usage_in into usage_reports in primary-key order. A row
// this statement inserted has first_seen = now() (its transaction's start);
// a row it updated was first seen by an earlier transaction. (xmax = 0, the
// usual test, cannot be read from a partitioned table.)
const upsert = `WITH up AS (
  INSERT INTO usage_reports AS t
    (key, window_start, process_id, window_end, region, spent, leased, rejected, degraded, final, seq, sent_at, would_reject,
     refunded, charged)
  SELECT key, window_start, process_id, window_end, region, spent, leased, rejected, degraded, final, seq, sent_at, would_reject,
     refunded, charged
  FROM usage_in
  ORDER BY key COLLATE "C", window_start, process_id COLLATE "C"
  ON CONFLICT (key, window_start, process_id) DO UPDATE SET
    spent      = GREATEST(t.spent, EXCLUDED.spent),
    rejected   = GREATEST(t.rejected, EXCLUDED.rejected),
    degraded   = GREATEST(t.degraded, EXCLUDED.degraded),
    would_reject = GREATEST(t.would_reject, EXCLUDED.would_reject),
    refunded   = GREATEST(t.refunded, EXCLUDED.refunded),
    charged    = GREATEST(t.charged, EXCLUDED.charged),
    leased     = CASE WHEN EXCLUDED.seq > t.seq THEN EXCLUDED.leased ELSE t.leased END,
    seq        = GREATEST(t.seq, EXCLUDED.seq),
    sent_at    = GREATEST(t.sent_at, EXCLUDED.sent_at),
    final      = t.final OR EXCLUDED.final,
    updated_at = now()
  WHERE EXCLUDED.seq > t.seq
     OR (EXCLUDED.final AND NOT t.final)
     OR EXCLUDED.spent > t.spent OR EXCLUDED.rejected > t.rejected OR EXCLUDED.degraded > t.degraded
     OR EXCLUDED.would_reject > t.would_reject
     OR EXCLUDED.refunded > t.refunded OR EXCLUDED.charged > t.charged
  RETURNING (t.first_seen = now()) AS inserted
)
SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted) FROM up`

var stagingColumns = []string{"key", "window_start", "process_id", "window_end", "region",
	"spent", "leased", "rejected", "degraded", "final", "seq", "sent_at", "would_reject", "refunded", "charged"}

// ensurePartitions creates the month partitions of usage_reports that $1's
// instants fall in, where missing, in a transaction of its own.
const ensurePartitions = `SELECT count(usage_ensure_partition(m)) FROM unnest($1::timestamptz[]) AS m`

// Write merges reports into the ledger in one transaction: the batch is
// merged per row in memory (Merge; one row cannot be upserted twice in one
// statement), sorted by primary key, copied into a temporary table, and
// upserted with one INSERT … ON CONFLICT that takes the rows in primary-key
// order (the lock order that keeps concurrent writers free of deadlocks).
// When a row's month has no partition yet (a new month, a window far in the
// past or future, or a month detached by retention), Write creates the
// batch's month partitions and writes the batch again. A data or
// constraint error fails the whole batch (see isTransient for how the
// Reconciler tells it from an outage).
func (w *Writer) Write(ctx context.Context, reports []ledger.Report) (WriteResult, error) {
	rows := Merge(reports)
	sortByKey(rows)
	res, err := w.write(ctx, rows)
	if err == nil || !isNoPartition(err) {
		return res, err
	}
	if _, err := w.pool.Exec(ctx, ensurePartitions, months(rows)); err != nil {
		return res, fmt.Errorf("reconcile: create partitions: %w", err)
	}
	return w.write(ctx, rows)
}

// write upserts rows, merged and sorted, in one transaction.
func (w *Writer) write(ctx context.Context, rows []ledger.Report) (WriteResult, error) {
	res := WriteResult{Rows: len(rows)}
	if len(rows) == 0 {
		return res, nil
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("reconcile: begin: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, createStaging); err != nil {
		return res, fmt.Errorf("reconcile: staging table: %w", err)
	}
	src := pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		r := &rows[i]
		return []any{r.Key, r.WindowStart, r.ProcessID, r.WindowEnd, r.Region,
			r.Spent, r.Leased, r.Rejected, r.Degraded, r.Final, r.Seq, r.SentAt, r.WouldReject, r.Refunded, r.Charged}, nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"usage_in"}, stagingColumns, src); err != nil {
		return res, fmt.Errorf("reconcile: copy: %w", err)
	}
	var ins, upd int64
	if err := tx.QueryRow(ctx, upsert).Scan(&ins, &upd); err != nil {
		return res, fmt.Errorf("reconcile: upsert: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("reconcile: commit: %w", err)
	}
	res.Inserted, res.Updated = int(ins), int(upd)
	res.Unchanged = res.Rows - res.Inserted - res.Updated
	return res, nil
}

// sortByKey sorts merged rows by primary key (key, window_start,
// process_id), bytewise as the upsert's ORDER BY … COLLATE "C" does, so that
// Postgres finds them already sorted.
func sortByKey(rows []ledger.Report) {
	slices.SortFunc(rows, func(a, b ledger.Report) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), a.WindowStart.Compare(b.WindowStart),
			strings.Compare(a.ProcessID, b.ProcessID))
	})
}

// months returns the first instant of every UTC month that rows' windows
// start in, once each.
func months(rows []ledger.Report) []time.Time {
	var out []time.Time
	for _, r := range rows {
		t := r.WindowStart.UTC()
		m := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		if !slices.ContainsFunc(out, m.Equal) {
			out = append(out, m)
		}
	}
	return out
}

// isNoPartition reports whether err is Postgres refusing a row because no
// partition of usage_reports holds its window_start: SQLSTATE 23514 (which
// isTransient would otherwise take for refused data) on the partitioned
// table itself, with no constraint named. A failed CHECK names its
// constraint and the partition.
func isNoPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && pe.ConstraintName == "" && pe.TableName == "usage_reports"
}

// Merge folds reports of the same (key, window, process) row into one, by
// the same rules as the upsert: greatest spent, rejected, degraded,
// would_reject, refunded and charged;
// leased, seq, window_end and region of the highest seq (the first of equal
// seqs); latest sent_at; final if any is. Times are first normalized to
// what Postgres stores (whole microseconds, UTC), so that window starts that
// differ below the microsecond, which are one row, merge.
func Merge(reports []ledger.Report) []ledger.Report {
	type pk struct {
		key, process string
		start        int64 // µs since the Unix epoch
	}
	idx := make(map[pk]int, len(reports))
	out := make([]ledger.Report, 0, len(reports))
	for _, r := range reports {
		normalize(&r)
		k := pk{r.Key, r.ProcessID, r.WindowStart.UnixMicro()}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, r)
			continue
		}
		m := &out[i]
		final := m.Final || r.Final
		spent, rejected, degraded := max(m.Spent, r.Spent), max(m.Rejected, r.Rejected), max(m.Degraded, r.Degraded)
		wouldReject := max(m.WouldReject, r.WouldReject)
		refunded, charged := max(m.Refunded, r.Refunded), max(m.Charged, r.Charged)
		if r.Seq > m.Seq {
			*m = r
		}
		m.Final, m.Spent, m.Rejected, m.Degraded, m.WouldReject = final, spent, rejected, degraded, wouldReject
		m.Refunded, m.Charged = refunded, charged
		if m.SentAt.Before(r.SentAt) {
			m.SentAt = r.SentAt
		}
	}
	return out
}
