package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quotaplatform/quota/ledger/export"
)

// A run's side effects go through two capabilities, so that the run's
// code has no preview branch: a Preview swaps both for ones that write
// and send nothing (preview.go), and a side effect added to a run goes
// through one of them or does not exist in a preview's type at all.
//
// outbox sends a run's events: the requests to the sink and the records
// of each attempt and answer (billing_sink_events) that make a send
// exactly-once.
type outbox interface {
	// add takes o into the run's batch, sending the batch when it is
	// full; o counts in st once acknowledged.
	add(ctx context.Context, o outgoing, st *Stats) error
	// flush sends the batch.
	flush(ctx context.Context, st *Stats) error
	// drop forgets a batch the run stops before sending (nothing of it
	// was recorded or sent).
	drop()
	// stored asks the sink whether it holds ev as frame, which an
	// ambiguous attempt may have stored (Settler).
	stored(ctx context.Context, se Settler, ev cloudevents.Event, frame json.RawMessage) (stored, decided bool, err error)
}

// books is what a run writes about the sink besides its events' attempts:
// its lock and registration, decisions about recorded events (held,
// settled, re-stamped, a legacy frame), stored carries, the watermark and
// the incremental checkpoint.
type books interface {
	// open begins a run with settings want: the sink's lock (release
	// frees it) and registration; watermark is billing_sinks.looked_through.
	open(ctx context.Context, want registration) (watermark time.Time, release func(), err error)
	// changedKeys is the keys an incremental pass reads (candidatesSQL's
	// arguments), dropping the carries a change made stale.
	changedKeys(ctx context.Context, args ...any) ([]string, error)
	// dropCarries drops the sink's stored carries: no checkpoint vouches
	// for them.
	dropCarries(ctx context.Context) error
	// carries is the writer of the carries a pass over [from, to) at now
	// reads past; nil: the pass neither reads nor stores carries.
	carries(from, to, now time.Time) *carryWriter
	// legacyFramed records the frame rebuilt for an event recorded before
	// frames were (migration 010).
	legacyFramed(ctx context.Context, r *export.Row, eventID string, frame json.RawMessage) error
	// restamped records event eventID's new frame, first attempted at.
	restamped(ctx context.Context, r *export.Row, eventID string, frame json.RawMessage, at time.Time) error
	// held records s held for a person, for why.
	held(ctx context.Context, r *export.Row, s *state, why string) error
	// settled records s acknowledged: the sink's records show it.
	settled(ctx context.Context, r *export.Row, s *state) error
	// advance moves the sink's watermark up to open.
	advance(ctx context.Context, open time.Time) error
	// checkpoint records a successful incremental pass: its checkpoint,
	// its now, and the keys it must read again (revisit) among those it
	// read (nil: every key).
	checkpoint(ctx context.Context, inc *increment, now time.Time, read, revisit []string) error
}

// sinkDB is what a run reads and records with: a pool, or a Preview's
// read-only transaction, in which a write that slipped past the books
// fails rather than changing anything.
type sinkDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// pgBooks is a run's books: Postgres.
type pgBooks struct{ p *Publisher }

func (b pgBooks) open(ctx context.Context, want registration) (time.Time, func(), error) {
	unlock, err := lockRun(ctx, b.p.pool, b.p.cfg.Sink)
	if err != nil {
		return time.Time{}, nil, err
	}
	watermark, err := register(ctx, b.p.db, b.p.cfg.Sink, want)
	if err != nil {
		unlock()
		return time.Time{}, nil, err
	}
	return watermark, unlock, nil
}

func (b pgBooks) changedKeys(ctx context.Context, args ...any) ([]string, error) {
	return queryKeys(ctx, b.p, carryCandidatesSQL, args...)
}

func (b pgBooks) dropCarries(ctx context.Context) error {
	if _, err := b.p.db.Exec(ctx, `DELETE FROM billing_sink_carries WHERE sink = $1`, b.p.cfg.Sink); err != nil {
		return fmt.Errorf("sink %q: drop the stored carries: %w", b.p.cfg.Sink, err)
	}
	return nil
}

func (b pgBooks) carries(from, to, now time.Time) *carryWriter { return b.p.carryWriter(from, to, now) }

func (b pgBooks) legacyFramed(ctx context.Context, r *export.Row, eventID string, frame json.RawMessage) error {
	if err := b.updateEvent(ctx, r, eventID, `frame = $6`, frame); err != nil {
		return fmt.Errorf("sink: record the frame of an event from before migration 010: %w", err)
	}
	return nil
}

func (b pgBooks) restamped(ctx context.Context, r *export.Row, eventID string, frame json.RawMessage, at time.Time) error {
	if err := b.updateEvent(ctx, r, eventID, `frame = $6, first_attempt_at = $7, updated_at = now()`, frame, at); err != nil {
		return fmt.Errorf("sink: record a re-stamped frame: %w", err)
	}
	return nil
}

func (b pgBooks) held(ctx context.Context, r *export.Row, s *state, why string) error {
	if err := b.updateEvent(ctx, r, s.eventID, `status = 'held', updated_at = now()`); err != nil {
		return fmt.Errorf("sink: hold event: %w", err)
	}
	b.p.cfg.Metrics.count(b.p.cfg.Sink, "held")
	b.p.cfg.Logger.Warn("sink event held for a person", "why", why, "sink", b.p.cfg.Sink,
		"event_id", s.eventID, "first_attempt", s.firstAttempt)
	return nil
}

func (b pgBooks) settled(ctx context.Context, r *export.Row, s *state) error {
	if err := b.updateEvent(ctx, r, s.eventID, `status = 'sent', acked_billed = billed, sent_at = now(),
    last_error = NULL, updated_at = now()`); err != nil {
		return fmt.Errorf("sink: record a settled event: %w", err)
	}
	b.p.cfg.Metrics.count(b.p.cfg.Sink, "settled")
	return nil
}

// updateEvent sets set (which numbers its arguments from $6) on the
// recorded event eventID of r's period.
func (b pgBooks) updateEvent(ctx context.Context, r *export.Row, eventID, set string, args ...any) error {
	_, err := b.p.db.Exec(ctx, `UPDATE billing_sink_events SET `+set+`
WHERE sink = $1 AND key = $2 AND period_start = $3 AND granularity = $4 AND event_id = $5`,
		append([]any{b.p.cfg.Sink, r.Key, r.PeriodStart, string(b.p.cfg.Granularity), eventID}, args...)...)
	return err
}

func (b pgBooks) advance(ctx context.Context, open time.Time) error {
	return advance(ctx, b.p.db, b.p.cfg.Sink, open)
}

// queryKeys runs sql, a query of keys, with args. Its answer is never
// nil, even empty: a nil increment.keys means a pass reads every key.
func queryKeys(ctx context.Context, p *Publisher, sql string, args ...any) ([]string, error) {
	rows, err := p.db.Query(ctx, sql, args...)
	var keys []string
	if err == nil {
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return nil, fmt.Errorf("sink %q: keys changed since the checkpoint: %w", p.cfg.Sink, err)
	}
	return keys, nil
}
