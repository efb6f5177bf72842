package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultKeep is how long the sinks' acknowledged rows are kept after
// their period ended (reconciler retention --sink-keep): the reconciler's
// default max report age (93 days), past which a period's figures can no
// longer change, so no correction needs its row.
const DefaultKeep = 93 * 24 * time.Hour

// retainChunk is the most rows one retention transaction removes.
const retainChunk = 50_000

// Retained is what Retain did for one sink.
type Retained struct {
	Sink string
	// Before: the sink's acknowledged rows of periods ending at or before
	// it are gone (the cutoff, or the sink's watermark if earlier).
	Before time.Time
	Rows   int64 // rows removed by this call
	// Busy: a run of the sink held its lock; nothing was removed.
	Busy bool
}

// Retain removes, for every sink with a watermark, the billing_sink_events
// rows the sink acknowledged (status 'sent') of periods that ended at or
// before before and before the sink's watermark (billing_sinks
// looked_through, so no run reads them again), adding per key and UTC
// month their count, corrections and billed figure to
// billing_sink_retained (migration 019): what an audit of an old invoice
// needs, not what a resend needs. Rows not acknowledged (pending, failed,
// held) stay however old, and every row of a younger period. The sink's
// retained_before moves up in the same transaction, and its runs never
// send a period that ended by then and has no row (Publisher.Run): a
// removed row is never sent again. It takes each sink's run lock and
// skips a sink whose run holds it (Busy).
func Retain(ctx context.Context, db *pgxpool.Pool, before time.Time) ([]Retained, error) {
	rows, err := db.Query(ctx, `SELECT sink, least(looked_through, $1) FROM billing_sinks WHERE looked_through IS NOT NULL ORDER BY sink`,
		before)
	if err != nil {
		return nil, fmt.Errorf("sink: retention: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Retained, error) {
		var s Retained
		err := r.Scan(&s.Sink, &s.Before)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("sink: retention: %w", err)
	}
	for i := range out {
		if err := retainSink(ctx, db, &out[i]); err != nil {
			return out, err
		}
	}
	return out, nil
}

// retainSink removes s's rows in chunks, each in a transaction of its own.
func retainSink(ctx context.Context, db *pgxpool.Pool, s *Retained) error {
	unlock, err := lockRun(ctx, db, s.Sink)
	if errors.Is(err, ErrRunning) {
		s.Busy = true
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	for {
		var n int64
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE billing_sinks SET retained_before = greatest(coalesce(retained_before, $2), $2),
    updated_at = now() WHERE sink = $1`, s.Sink, s.Before); err != nil {
				return err
			}
			return tx.QueryRow(ctx, retainSQL, s.Sink, s.Before, retainChunk).Scan(&n)
		})
		if err != nil {
			return fmt.Errorf("sink %q: retention: %w", s.Sink, err)
		}
		s.Rows += n
		if n < retainChunk {
			return nil
		}
	}
}

// retainSQL removes up to $3 acknowledged rows of sink $1 whose periods
// ended at or before $2 and adds them up in billing_sink_retained; it
// returns how many it removed.
const retainSQL = `WITH gone AS (
    DELETE FROM billing_sink_events
    WHERE (sink, key, period_start, granularity) IN (
        SELECT sink, key, period_start, granularity FROM billing_sink_events
        WHERE sink = $1 AND status = 'sent' AND period_end <= $2
        LIMIT $3)
    RETURNING key, granularity, period_start, revision, acked_billed, sent_at),
kept AS (
    INSERT INTO billing_sink_retained AS r (sink, key, granularity, month, periods, revisions, billed, first_sent, last_sent)
    SELECT $1, key, granularity, date_trunc('month', period_start, 'UTC'), count(*), sum(revision), sum(acked_billed),
           min(sent_at), max(sent_at)
    FROM gone GROUP BY key, granularity, date_trunc('month', period_start, 'UTC')
    ON CONFLICT (sink, key, granularity, month) DO UPDATE SET
        periods = r.periods + EXCLUDED.periods, revisions = r.revisions + EXCLUDED.revisions,
        billed = r.billed + EXCLUDED.billed, first_sent = least(r.first_sent, EXCLUDED.first_sent),
        last_sent = greatest(r.last_sent, EXCLUDED.last_sent))
SELECT count(*) FROM gone`

// retainedBefore reads the sink's retained_before (zero: none).
func retainedBefore(ctx context.Context, db rowQuerier, sinkName string) (time.Time, error) {
	var t *time.Time
	err := db.QueryRow(ctx, `SELECT retained_before FROM billing_sinks WHERE sink = $1`, sinkName).Scan(&t)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("sink: retained_before: %w", err)
	case t == nil:
		return time.Time{}, nil
	}
	return *t, nil
}
