package reconcile

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/ledger"
)

// WriteResult counts what one batch did to the ledger.
type WriteResult struct {
	// Rows is the number of distinct (key, window, region, process) rows
	// in the batch after merging reports for the same row.
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
// one database at once: every transaction locks its rows in primary-key
// order, so two transactions that share rows wait for each other but never
// deadlock (a transaction only ever waits for a row above every row it
// holds, so no cycle of waits can form).
type Writer struct {
	pool  *pgxpool.Pool
	cfg   WriterConfig
	begin string // sets the lock timeout and creates the staging table
}

// WriterConfig configures a Writer. Start from DefaultWriterConfig.
type WriterConfig struct {
	// Parallel is the most transactions one batch is written in at once,
	// each on its own connection of the pool. One Postgres backend runs on
	// one core, and one transaction at a time left the second core of a
	// 2-core machine idle (BenchmarkWrite, new rows: 140–146k rows/s in
	// one transaction, 211–215k in two parts; 3 or 4 parts were slower
	// than 2 there). A batch of at least 2·MinPartRows rows is split into
	// contiguous primary-key ranges, each upserted in key order by its own
	// transaction. The pool needs Parallel connections to run them all at
	// once (fewer only queue them). 1 writes every batch in one
	// transaction. Default 2; about Postgres's cores is the useful range.
	Parallel int
	// MinPartRows is the fewest rows in a part: smaller batches are split
	// into fewer parts (a part costs a transaction's round trips and
	// commit, about what a few hundred rows cost). Default 1000.
	MinPartRows int
	// MaxNewPartitions is the most month partitions of usage_reports one
	// Write creates (in one transaction); rows of further missing months
	// are left unwritten (MonthsError.Waiting; the Reconciler hands their
	// messages back to the stream for a later batch). Each creation holds
	// a few locks until its transaction ends, and Postgres's lock table is
	// shared and small (max_locks_per_transaction × connections). 0 means
	// the default, 12.
	MaxNewPartitions int
	// LockTimeout bounds how long one part's transaction waits for a lock
	// (Postgres lock_timeout, set per transaction). A part that waits
	// longer fails with SQLSTATE 55P03 instead of waiting for ever: a
	// month partition held by a long maintenance statement made a whole
	// batch, and every batch behind it, wait silently (issue 37, item 0).
	// 0 means the default, 5s.
	LockTimeout time.Duration
}

// DefaultWriterConfig returns the documented defaults.
func DefaultWriterConfig() WriterConfig {
	return WriterConfig{Parallel: 2, MinPartRows: 1000, MaxNewPartitions: defaultMaxNewPartitions, LockTimeout: defaultLockTimeout}
}

// MaxWriteParallel bounds WriterConfig.Parallel: more parts than
// Postgres has cores only add commits and contention.
const MaxWriteParallel = 64

func (c *WriterConfig) validate() error {
	var errs []error
	if c.Parallel < 1 || c.Parallel > MaxWriteParallel {
		errs = append(errs, fmt.Errorf("reconcile: writer config Parallel: must be 1 to %d, got %d", MaxWriteParallel, c.Parallel))
	}
	if c.MinPartRows < 1 {
		errs = append(errs, fmt.Errorf("reconcile: writer config MinPartRows: must be at least 1, got %d", c.MinPartRows))
	}
	if c.MaxNewPartitions == 0 {
		c.MaxNewPartitions = defaultMaxNewPartitions
	}
	if c.MaxNewPartitions < 1 || c.MaxNewPartitions > MaxNewPartitionsLimit {
		errs = append(errs, fmt.Errorf("reconcile: writer config MaxNewPartitions: must be 0 (default) or 1 to %d, got %d", MaxNewPartitionsLimit, c.MaxNewPartitions))
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = defaultLockTimeout
	}
	if c.LockTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("reconcile: writer config LockTimeout: must be 0 (default) or at least 1ms, got %v", c.LockTimeout))
	}
	return errors.Join(errs...)
}

const defaultLockTimeout = 5 * time.Second

// MaxNewPartitionsLimit bounds WriterConfig.MaxNewPartitions (64 is
// Postgres's default max_locks_per_transaction).
const MaxNewPartitionsLimit = 64

const defaultMaxNewPartitions = 12

// NewWriter returns a Writer on pool with DefaultWriterConfig. The schema
// must be migrated (migrations.Migrate).
func NewWriter(pool *pgxpool.Pool) *Writer {
	w, _ := NewWriterWithConfig(pool, DefaultWriterConfig()) // the defaults are valid
	return w
}

// NewWriterWithConfig returns a Writer on pool configured by cfg, which it
// validates.
func NewWriterWithConfig(pool *pgxpool.Pool, cfg WriterConfig) (*Writer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// One round trip: the lock timeout rides with the staging table.
	begin := fmt.Sprintf("SET LOCAL lock_timeout = %d; %s", cfg.LockTimeout.Milliseconds(), createStaging)
	return &Writer{pool: pool, cfg: cfg, begin: begin}, nil
}

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
  ORDER BY key COLLATE "C", window_start, region COLLATE "C", process_id COLLATE "C"
  ON CONFLICT (key, window_start, region, process_id) DO UPDATE SET
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

// copyStaging fills usage_in from a binary COPY stream (encodeCopy).
const copyStaging = `COPY usage_in (key, window_start, process_id, window_end, region, spent, leased, rejected, degraded,
  final, seq, sent_at, would_reject, refunded, charged) FROM STDIN (FORMAT binary)`

// ensurePartitions creates the month partitions of usage_reports that $1's
// instants fall in, where missing, in a transaction of its own.
const ensurePartitions = `SELECT count(usage_ensure_partition(m)) FROM unnest($1::timestamptz[]) AS m`

// Write merges reports into the ledger: the batch is merged per row in
// memory (Merge's rules; one row cannot be upserted twice in one statement),
// sorted by primary key, cut into up to WriterConfig.Parallel contiguous
// key ranges, and each range is copied into a temporary table and upserted
// with one INSERT … ON CONFLICT that takes its rows in primary-key order
// (the lock order that keeps concurrent writers free of deadlocks), in a
// transaction of its own, the ranges at the same time on separate
// connections. Write returns when every part has committed or failed; the
// result is the sum of the parts'.
//
// A batch is not atomic when it is split: if a part fails, the others may
// have committed, and Write returns the failure (the first part's in key
// order that is not a missing partition). Writing the batch again is
// harmless (the merge is idempotent), which is what the Reconciler does
// before it acknowledges anything; rows written by the failed attempt then
// count as Unchanged.
//
// When a row's month has no partition yet (a new month, or a window far in
// the past or future), Write creates the month partitions of the parts
// that failed for it, at most WriterConfig.MaxNewPartitions, and writes
// those parts again. It creates none for a month that retention detached
// (usage_detached_months). The rows of a detached month, and of months
// past the limit, are not written: Write writes the rest and returns a
// *MonthsError naming those months. A data or constraint error fails the batch (see isTransient
// for how the Reconciler tells it from an outage).
func (w *Writer) Write(ctx context.Context, reports []ledger.Report) (WriteResult, error) {
	rows := mergeSorted(reports)
	res := WriteResult{Rows: len(rows)}
	if len(rows) == 0 {
		return res, nil
	}
	parts := split(rows, w.cfg.Parallel, w.cfg.MinPartRows)
	results, errs := w.writeParts(ctx, parts)
	var again [][]ledger.Report // parts refused for a missing partition
	var failed error
	for i, err := range errs {
		switch {
		case err == nil:
			res.add(results[i])
		case isNoPartition(err):
			again = append(again, parts[i])
		case failed == nil:
			failed = err
		}
	}
	if failed != nil {
		return WriteResult{Rows: len(rows)}, failed
	}
	if len(again) == 0 {
		return res, nil
	}
	// Partitions are created after every part has ended, in a transaction
	// of their own: creating one locks usage_reports, which a part still
	// writing would hold.
	var ms []time.Time
	for _, p := range again {
		ms = appendMonths(ms, p)
	}
	created, merr, err := w.ensureMonths(ctx, ms)
	if err != nil {
		return WriteResult{Rows: len(rows)}, err
	}
	if merr != nil {
		again = keepMonths(again, created)
	}
	results, errs = w.writeParts(ctx, again)
	for i, err := range errs {
		if err != nil {
			return WriteResult{Rows: len(rows)}, err
		}
		res.add(results[i])
	}
	if merr != nil {
		return res, merr
	}
	return res, nil
}

func (r *WriteResult) add(p WriteResult) {
	r.Inserted += p.Inserted
	r.Updated += p.Updated
	r.Unchanged += p.Unchanged
}

// split cuts rows, sorted, into at most n contiguous parts of about equal
// size and at least minRows rows each (one part when rows are fewer than
// 2·minRows). Contiguous key ranges rather than a hash of the key: the
// parts are disjoint either way, and ranges keep each transaction's
// inserts on B-tree pages of its own instead of both contending for every
// leaf page.
func split(rows []ledger.Report, n, minRows int) [][]ledger.Report {
	n = max(1, min(n, len(rows)/max(1, minRows)))
	parts := make([][]ledger.Report, n)
	for i := range parts {
		parts[i] = rows[i*len(rows)/n : (i+1)*len(rows)/n]
	}
	return parts
}

// writeParts writes each part in a transaction of its own, all at once
// (the first in the calling goroutine), and returns when all have ended:
// a failed part does not cancel the others, so that parts refused only
// for a missing partition can be written again alone.
func (w *Writer) writeParts(ctx context.Context, parts [][]ledger.Report) ([]WriteResult, []error) {
	results, errs := make([]WriteResult, len(parts)), make([]error, len(parts))
	var wg sync.WaitGroup
	for i := 1; i < len(parts); i++ {
		wg.Go(func() { results[i], errs[i] = w.write(ctx, parts[i]) })
	}
	results[0], errs[0] = w.write(ctx, parts[0])
	wg.Wait()
	return results, errs
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
	if _, err := tx.Exec(ctx, w.begin); err != nil {
		return res, fmt.Errorf("reconcile: staging table: %w", err)
	}
	buf := copyBufs.Get().(*[]byte)
	*buf = encodeCopy((*buf)[:0], rows)
	_, err = tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(*buf), copyStaging)
	copyBufs.Put(buf)
	if err != nil {
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

// copyBufs recycles the COPY streams (about 150 bytes a row) between
// batches.
var copyBufs = sync.Pool{New: func() any { return new([]byte) }}

// pgEpochMicros is Postgres's epoch for binary timestamps, 2000-01-01 UTC,
// in microseconds since the Unix epoch.
const pgEpochMicros = 946_684_800_000_000

// encodeCopy appends rows to b as a COPY … (FORMAT binary) stream of
// copyStaging's columns. It replaces pgx's CopyFrom, whose per-value
// encoding (an []any per row, a type lookup per value) took about 0.7 µs
// a row, half of the Writer's Go time in the CPU profile of
// BenchmarkWrite; this takes about 16 ns, as the column types are fixed.
func encodeCopy(b []byte, rows []ledger.Report) []byte {
	b = append(b, "PGCOPY\n\xff\r\n\x00"...)
	b = binary.BigEndian.AppendUint32(b, 0) // flags
	b = binary.BigEndian.AppendUint32(b, 0) // header extension length
	text := func(b []byte, s string) []byte {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		return append(b, s...)
	}
	int8 := func(b []byte, v int64) []byte {
		b = binary.BigEndian.AppendUint32(b, 8)
		return binary.BigEndian.AppendUint64(b, uint64(v))
	}
	ts := func(b []byte, t time.Time) []byte { return int8(b, t.UnixMicro()-pgEpochMicros) }
	for i := range rows {
		r := &rows[i]
		b = binary.BigEndian.AppendUint16(b, 15) // columns
		b = text(b, r.Key)
		b = ts(b, r.WindowStart)
		b = text(b, r.ProcessID)
		b = ts(b, r.WindowEnd)
		b = text(b, r.Region)
		b = int8(b, r.Spent)
		b = int8(b, r.Leased)
		b = int8(b, r.Rejected)
		b = int8(b, r.Degraded)
		b = binary.BigEndian.AppendUint32(b, 1)
		if r.Final {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = int8(b, r.Seq)
		b = ts(b, r.SentAt)
		b = int8(b, r.WouldReject)
		b = int8(b, r.Refunded)
		b = int8(b, r.Charged)
	}
	return binary.BigEndian.AppendUint16(b, 0xffff) // trailer: -1
}

// mergeSorted returns reports merged per row by Merge's rules, sorted by
// primary key (key, window_start, region, process_id), bytewise as the upsert's
// ORDER BY … COLLATE "C" does, so that Postgres finds them already sorted.
// It sorts small keys, each with its report's place in the batch, rather
// than the reports (about 200 bytes each), and folds a row's reports as
// neighbours, in batch order, rather than through Merge's map: for 5,000
// distinct rows 2.3 ms against 3.5 ms for Merge and a sort of its result
// (Go time that, on a 2-core machine, Postgres's backends wait for).
func mergeSorted(reports []ledger.Report) []ledger.Report {
	type sortKey struct {
		key, region, process string
		start                int64 // µs since the Unix epoch, as normalize leaves it
		i                    int
	}
	keys := make([]sortKey, len(reports))
	for i := range reports {
		r := &reports[i]
		keys[i] = sortKey{r.Key, r.Region, r.ProcessID, r.WindowStart.UnixMicro(), i}
	}
	slices.SortFunc(keys, func(a, b sortKey) int {
		return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.start, b.start),
			strings.Compare(a.region, b.region), strings.Compare(a.process, b.process), cmp.Compare(a.i, b.i))
	})
	out := make([]ledger.Report, 0, len(reports))
	for j, k := range keys {
		r := reports[k.i]
		normalize(&r)
		if p := keys[max(j-1, 0)]; j > 0 && p.key == k.key && p.start == k.start && p.region == k.region && p.process == k.process {
			fold(&out[len(out)-1], r)
			continue
		}
		out = append(out, r)
	}
	return out
}

// appendMonths appends to out the first instant of every UTC month that
// rows' windows start in and out lacks.
func appendMonths(out []time.Time, rows []ledger.Report) []time.Time {
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

// Merge folds reports of the same (key, window, region, process) row into
// one, by the same rules as the upsert: greatest spent, rejected, degraded,
// would_reject, refunded and charged; leased, seq and window_end of the
// highest seq (the first of equal seqs); latest sent_at; final if any is.
// Reports of different regions are different rows, whatever process they
// name: a region cannot change another's row. Times are first normalized to
// what Postgres stores (whole microseconds, UTC), so that window starts that
// differ below the microsecond, which are one row, merge. Rows come in the
// order of their first report (Write merges by the same rules, in key
// order: mergeSorted).
func Merge(reports []ledger.Report) []ledger.Report {
	type pk struct {
		key, region, process string
		start                int64 // µs since the Unix epoch
	}
	idx := make(map[pk]int, len(reports))
	out := make([]ledger.Report, 0, len(reports))
	for _, r := range reports {
		normalize(&r)
		k := pk{r.Key, r.Region, r.ProcessID, r.WindowStart.UnixMicro()}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, r)
			continue
		}
		fold(&out[i], r)
	}
	return out
}

// fold merges report r into m, a merge of earlier reports of its row.
func fold(m *ledger.Report, r ledger.Report) {
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
