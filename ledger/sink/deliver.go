package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/ledger/export"
)

// Framer is a Sender whose request carries more than the event: a Stripe
// meter event's customer, value, timestamp and identifier, decided when
// the event is first sent. The Publisher records the frame with the event
// before the first attempt and sends every attempt with the recorded
// frame, so one identifier never carries two payloads (a customer mapping
// changed, a timestamp of "now" taken again).
type Framer interface {
	Sender
	// Frame decides ev's request at now; prev is the recorded frame of the
	// event ev replaces (nil for a period's first event, or none
	// recorded).
	Frame(ev cloudevents.Event, prev json.RawMessage, now time.Time) (json.RawMessage, error)
	// SendFrame sends ev as frame says; nil means acknowledged.
	SendFrame(ctx context.Context, ev cloudevents.Event, frame json.RawMessage) error
}

// Restamper is a Framer whose recorded request can go stale before it is
// acknowledged: Stripe bills a meter event on the invoice of its
// timestamp, and never once that invoice is finalized.
type Restamper interface {
	Framer
	// Restamp returns frame as it must be sent at now, and whether that
	// differs from frame (its invoice was finalized meanwhile: a new
	// timestamp, so a new identifier).
	Restamp(ev cloudevents.Event, frame json.RawMessage, now time.Time) (json.RawMessage, bool, error)
	// Definite reports whether err, an attempt's failure, means the sink
	// stored nothing (429, connection refused), as opposed to an outcome
	// that may have stored the event (timeout, lost answer, 5xx).
	Definite(err error) bool
}

// Settler is a Restamper that can ask the sink whether it holds an event
// an ambiguous attempt may have stored (Stripe: its meter event
// summaries). decided false: it cannot tell, and a person settles it.
type Settler interface {
	Restamper
	Stored(ctx context.Context, ev cloudevents.Event, frame json.RawMessage) (stored, decided bool, err error)
}

// BatchFramer is a Framer that sends many frames in one request (Stripe's
// v2 meter event stream): the Publisher records a batch's events, each
// with its exact frame, before the request, and each one's answer after.
type BatchFramer interface {
	Framer
	// BatchSize is the most frames one request carries; 1 sends each
	// with SendFrame.
	BatchSize() int
	// SendFrames sends frames (of evs) in as few requests as it can,
	// telling how many it made, at now; errs[i] is frame i's answer (nil:
	// acknowledged).
	SendFrames(ctx context.Context, evs []cloudevents.Event, frames []json.RawMessage, now time.Time) (errs []error, requests int)
}

// legacyFramer is a Framer that can rebuild the request sent for an event
// recorded before frames were (migration 010), so that its resend is the
// same request.
type legacyFramer interface {
	legacyFrame(ev cloudevents.Event) (json.RawMessage, error)
}

// Statuses of billing_sink_events (migrations 004 and 010).
const (
	statusPending = "pending" // recorded, maybe sent, answer not recorded
	statusSent    = "sent"    // acknowledged
	statusFailed  = "failed"  // refused or unanswered: sent again, unchanged
	statusHeld    = "held"    // unacknowledged past the dedupe window
)

// state is a billing_sink_events row. Its billed column holds the billed
// figure of the latest event (before net billing the billed figure was
// the gross allowed cost, so rows written then compare correctly),
// acked_billed the billed figure the sink acknowledged (migration 022
// named them; spent and acked_spent before).
type state struct {
	revision     int
	eventID      string
	figures      figures // of the latest event
	acked        int64   // billed figure the sink holds
	data         json.RawMessage
	frame        json.RawMessage // nil: none recorded (rows from before 010, or a plain Sender)
	status       string
	firstAttempt time.Time // zero: unknown (rows from before 010)
	lastAttempt  time.Time // zero: unknown (rows from before 019)
	// maybeStored: an attempt of frame may have reached the sink (an
	// ambiguous failure, or a 'pending' row whose answer is unknown).
	maybeStored bool
}

// figures are what an event says about its period: a period whose
// figures changed gets a correction. Net and CarriedOut follow from them.
type figures struct {
	billed, allowed, refunded, charged, carriedIn, rejected, degraded int64
}

func rowFigures(r *export.Row) figures {
	return figures{billed: r.Billed, allowed: r.Allowed, refunded: r.Refunded, charged: r.Charged, carriedIn: r.CarriedIn,
		rejected: r.Rejected, degraded: r.Degraded}
}

// period brings the sink up to date for one closed period: an
// unacknowledged event first, as recorded (re-stamped if a Restamper's
// invoice was finalized meanwhile and no attempt may have stored it),
// then a correction if the ledger's figures moved on. now is the send
// time (Config.Clock).
func (p *Publisher) period(ctx context.Context, r *export.Row, s *state, now time.Time, st *Stats) error {
	if s == nil && !p.retained.IsZero() && !r.PeriodEnd.After(p.retained) {
		st.Retained++
		return nil
	}
	if p.skip(r, s) {
		st.Skipped++
		return nil
	}
	if s != nil && s.status != statusSent {
		if p.pastWindow(s, now) {
			return p.hold(ctx, r, s, st, "unacknowledged past the dedupe window")
		}
		if rs, ok := p.send.(Restamper); ok && s.frame != nil {
			ev, err := newEvent(p.cfg.Source, p.cfg.Type, s.eventID, s.data, r.Key, r.PeriodEnd)
			if err != nil {
				return err
			}
			f, stale, err := rs.Restamp(ev, s.frame, now)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrSinkRefused, err)
			}
			if stale && s.maybeStored {
				// Re-sent as recorded it would land on a finalized invoice
				// if the sink lacks it; re-stamped it would bill twice if
				// the sink has it. The sink's own records decide, or a
				// person.
				stored, decided := false, false
				se, settles := rs.(Settler)
				if settles && p.tooYoung(s, now) {
					// The sink's records may not show the attempt yet: a
					// later pass decides.
					st.Unsettled++
					return nil
				}
				if settles {
					if stored, decided, err = p.out.stored(ctx, se, ev, s.frame); err != nil {
						return fmt.Errorf("%w: %w", ErrSinkRefused, err)
					}
				}
				switch {
				case !decided:
					return p.hold(ctx, r, s, st, "maybe delivered, and its invoice is finalized")
				case stored:
					if err := p.settled(ctx, r, s); err != nil {
						return err
					}
					st.Settled++
					return p.correct(ctx, r, s, now, st)
				}
				st.Settled++ // not stored: re-stamped below
			}
			if stale {
				if err := p.books.restamped(ctx, r, s.eventID, f, now); err != nil {
					return err
				}
				s.frame, s.firstAttempt = f, now
				st.Restamped++
			}
		}
		if err := p.deliver(ctx, r, s.revision, s.eventID, s.data, s.figures, s.acked, s.frame, now, false, "resent", st); err != nil {
			return err
		}
		if s.figures != rowFigures(r) {
			// A correction follows: it needs the resend's answer.
			if err := p.out.flush(ctx, st); err != nil {
				return err
			}
		}
		s.status, s.acked = statusSent, s.figures.billed
	}
	return p.correct(ctx, r, s, now, st)
}

// tooYoung: s's last attempt is more recent than Config.SettleAfter, so
// the sink's records may not show it yet.
func (p *Publisher) tooYoung(s *state, now time.Time) bool {
	last := s.lastAttempt
	if last.IsZero() {
		last = s.firstAttempt
	}
	return p.cfg.SettleAfter > 0 && !last.IsZero() && now.Sub(last) < p.cfg.SettleAfter
}

// settled records s acknowledged: the sink's records show it holds it.
func (p *Publisher) settled(ctx context.Context, r *export.Row, s *state) error {
	if err := p.books.settled(ctx, r, s); err != nil {
		return err
	}
	s.status, s.acked = statusSent, s.figures.billed
	return nil
}

// correct sends r's period's first event, or a correction if the ledger's
// figures moved on from what s, acknowledged, holds.
func (p *Publisher) correct(ctx context.Context, r *export.Row, s *state, now time.Time, st *Stats) error {
	switch {
	case s == nil:
		return p.sendRevision(ctx, r, 0, "", 0, nil, now, "sent", st)
	case s.figures == rowFigures(r):
		st.Unchanged++
	default:
		return p.sendRevision(ctx, r, s.revision+1, s.eventID, s.figures.billed, s.frame, now, "correction", st)
	}
	return nil
}

// pastWindow: s was first attempted longer than Config.ResendWindow ago,
// so the receiver may have forgotten its identifier.
func (p *Publisher) pastWindow(s *state, now time.Time) bool {
	return p.cfg.ResendWindow > 0 && !s.firstAttempt.IsZero() && now.Sub(s.firstAttempt) > p.cfg.ResendWindow
}

// hold marks s held and lists it: neither it nor a newer revision of its
// period is sent until a person settles it (SettleHeld).
func (p *Publisher) hold(ctx context.Context, r *export.Row, s *state, st *Stats, why string) error {
	if s.status != statusHeld {
		if err := p.books.held(ctx, r, s, why); err != nil {
			return err
		}
	}
	st.Held = append(st.Held, HeldEvent{Key: r.Key, PeriodStart: r.PeriodStart, EventID: s.eventID, Revision: s.revision,
		Billed: s.figures.billed, Acked: s.acked, FirstAttempt: s.firstAttempt})
	return nil
}

// skip asks Config.Skip about a period the sink does not hold with r's
// figures.
func (p *Publisher) skip(r *export.Row, s *state) bool {
	if p.cfg.Skip == nil {
		return false
	}
	if s == nil {
		return p.cfg.Skip(*r, 0)
	}
	if s.status == statusSent && s.figures == rowFigures(r) {
		return false
	}
	return p.cfg.Skip(*r, s.acked)
}

// sendRevision builds and delivers revision rev of r's period; prevBilled
// is what the replaced revision billed, which the sink holds, prevFrame
// its recorded frame; result counts it once acknowledged.
func (p *Publisher) sendRevision(ctx context.Context, r *export.Row, rev int, replaces string, prevBilled int64,
	prevFrame json.RawMessage, now time.Time, result string, st *Stats) error {
	delta := r.Billed - prevBilled
	d, err := json.Marshal(Data{Key: r.Key, PeriodStart: r.PeriodStart, PeriodEnd: r.PeriodEnd, Granularity: p.cfg.Granularity,
		Billed: r.Billed, Allowed: r.Allowed, Refunded: r.Refunded, Charged: r.Charged, Net: r.Net,
		CarriedIn: r.CarriedIn, CarriedOut: r.CarriedOut, Uncredited: r.Uncredited, Rejected: r.Rejected, Degraded: r.Degraded,
		Windows:            r.Windows,
		ClosedByReconciler: r.ClosedByReconciler, Revision: rev, Replaces: replaces, PreviousBilled: prevBilled, BilledDelta: delta})
	if err != nil {
		return fmt.Errorf("sink: event data: %w", err)
	}
	id := EventID(r.Key, r.PeriodStart, p.cfg.Granularity, rev)
	return p.deliver(ctx, r, rev, id, d, rowFigures(r), prevBilled, prevFrame, now, true, result, st)
}

// deliver sends one event and records the outcome: acknowledged, the sink
// holds f.billed; refused, it still holds prevAcked and the event is sent
// again next run. A fresh event (fresh) is first recorded 'pending' with
// its data and frame, before any byte of it leaves: if the answer or its
// record is lost, the next run sends exactly this payload again, never
// other figures under its id. A resend uses the recorded data and frame;
// a fresh event's frame is the replaced event's (a Framer decides its own
// from it). The event joins the run's batch (BatchFramer), sent when the
// batch is full or the page ends (flush); result counts it in Stats and
// metrics once acknowledged.
func (p *Publisher) deliver(ctx context.Context, r *export.Row, rev int, id string, data json.RawMessage,
	f figures, prevAcked int64, frame json.RawMessage, now time.Time, fresh bool, result string, st *Stats) error {
	ev, err := newEvent(p.cfg.Source, p.cfg.Type, id, data, r.Key, r.PeriodEnd)
	if err != nil {
		return err
	}
	framer, framed := p.send.(Framer)
	if lf, ok := p.send.(legacyFramer); ok && framed && !fresh && frame == nil {
		if frame, err = lf.legacyFrame(ev); err != nil {
			return fmt.Errorf("%w: %w", ErrSinkRefused, err)
		}
		if err := p.books.legacyFramed(ctx, r, id, frame); err != nil {
			return err
		}
	}
	if fresh {
		prev := frame
		frame = nil
		if framed {
			if frame, err = framer.Frame(ev, prev, now); err != nil {
				return fmt.Errorf("%w: %w", ErrSinkRefused, err)
			}
		}
	}
	return p.out.add(ctx, outgoing{key: r.Key, start: r.PeriodStart, end: r.PeriodEnd, rev: rev, id: id, data: data,
		f: f, prevAcked: prevAcked, ev: ev, frame: frame, fresh: fresh, now: now, result: result}, st)
}

// outgoing is an event of the run's batch: recorded, sent and answered
// together with the others (flush).
type outgoing struct {
	key        string
	start, end time.Time
	rev        int
	id         string
	data       json.RawMessage
	f          figures
	prevAcked  int64
	ev         cloudevents.Event
	frame      json.RawMessage // nil: a plain Sender's event
	fresh      bool
	now        time.Time // the send time it was framed at
	result     string    // its Stats and metrics count once acknowledged
}

// pgOutbox is a run's outbox: the sink, and Postgres for the records of
// each attempt. queue is the run's batch: one Run at a time uses it,
// under the sink's lock.
type pgOutbox struct {
	p     *Publisher
	queue []outgoing
}

func (ob *pgOutbox) add(ctx context.Context, o outgoing, st *Stats) error {
	ob.queue = append(ob.queue, o)
	if len(ob.queue) >= ob.batchSize() {
		return ob.flush(ctx, st)
	}
	return nil
}

func (ob *pgOutbox) drop() { ob.queue = nil }

func (ob *pgOutbox) stored(ctx context.Context, se Settler, ev cloudevents.Event, frame json.RawMessage) (bool, bool, error) {
	return se.Stored(ctx, ev, frame)
}

// batchSize is how many events one request carries (BatchFramer), else 1.
func (ob *pgOutbox) batchSize() int {
	if bf, ok := ob.p.send.(BatchFramer); ok {
		return max(1, bf.BatchSize())
	}
	return 1
}

// flush sends the run's batch: records every event 'pending' (a fresh
// one with its data and frame) before any of it leaves, sends them (in
// one request for a BatchFramer), and records each answer. The events
// the sink refused are recorded failed, to be sent again unchanged, and
// stop the run (ErrSinkRefused); the others are acknowledged.
func (ob *pgOutbox) flush(ctx context.Context, st *Stats) error {
	p := ob.p
	q := ob.queue
	ob.queue = nil
	if len(q) == 0 {
		return nil
	}
	g := string(p.cfg.Granularity)
	b := &pgx.Batch{}
	for _, o := range q {
		if o.fresh {
			b.Queue(pendingSQL, p.cfg.Sink, o.key, o.start, g, o.end, o.rev, o.id, o.f.billed, o.f.rejected, o.f.degraded,
				o.prevAcked, o.data, nullableJSON(o.frame), o.now)
		} else {
			// In flight: if the answer is never recorded, the attempt may
			// have stored it.
			b.Queue(resendSQL, p.cfg.Sink, o.key, o.start, g, o.id, o.now)
		}
	}
	if err := p.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("sink: record events before sending: %w", err)
	}
	errs := ob.sendAll(ctx, q, st)
	b = &pgx.Batch{}
	var refused error
	for i, o := range q {
		status, acked, lastErr, ambiguous := statusSent, o.f.billed, "", false
		if err := errs[i]; err != nil {
			status, acked, lastErr = statusFailed, o.prevAcked, err.Error()
			rs, ok := p.send.(Restamper)
			ambiguous = !ok || !rs.Definite(err)
			if refused == nil {
				refused = err
			}
			p.cfg.Logger.Debug("sink refused an event", "sink", p.cfg.Sink, "key", o.key, "period", o.start, "err", err)
		}
		b.Queue(outcomeSQL, p.cfg.Sink, o.key, o.start, g, o.id, status, acked, nullable(lastErr), ambiguous)
	}
	if err := p.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("sink: record event outcome (the events stay pending and are sent again, unchanged): %w", err)
	}
	for i, o := range q {
		if errs[i] != nil {
			p.cfg.Metrics.count(p.cfg.Sink, "failed")
			continue
		}
		p.cfg.Metrics.count(p.cfg.Sink, o.result)
		st.acked(o.result)
	}
	if refused != nil {
		return fmt.Errorf("%w: %w", ErrSinkRefused, refused)
	}
	return nil
}

// sendAll sends q's events, each bounded by Config.SendTimeout: in one
// request for a BatchFramer, else one by one, stopping at the first
// refusal (the rest are refused unsent: they are sent again next run).
func (ob *pgOutbox) sendAll(ctx context.Context, q []outgoing, st *Stats) []error {
	p := ob.p
	if bf, ok := p.send.(BatchFramer); ok && bf.BatchSize() > 1 {
		evs, frames := make([]cloudevents.Event, len(q)), make([]json.RawMessage, len(q))
		for i, o := range q {
			evs[i], frames[i] = o.ev, o.frame
		}
		sctx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
		defer cancel()
		errs, requests := bf.SendFrames(sctx, evs, frames, q[0].now)
		st.Requests += requests
		return errs
	}
	errs := make([]error, len(q))
	framer, framed := p.send.(Framer)
	for i, o := range q {
		sctx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
		if framed && o.frame != nil {
			errs[i] = framer.SendFrame(sctx, o.ev, o.frame)
		} else {
			errs[i] = p.send.Send(sctx, o.ev)
		}
		cancel()
		st.Requests++
		if errs[i] != nil {
			for j := i + 1; j < len(q); j++ {
				errs[j] = fmt.Errorf("not sent: an earlier event of the batch was refused: %w", errs[i])
			}
			break
		}
	}
	return errs
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullableJSON(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return b
}

// pendingSQL records a fresh event before it is sent: its payload, and
// acked_billed still what the sink held before it.
const pendingSQL = `INSERT INTO billing_sink_events AS e
    (sink, key, period_start, granularity, period_end, revision, event_id, billed, rejected, degraded,
     acked_billed, data, frame, status, attempts, first_attempt_at, last_attempt_at, maybe_stored)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'pending', 0, $14, $14, false)
ON CONFLICT (sink, key, period_start, granularity) DO UPDATE SET
    period_end = EXCLUDED.period_end, revision = EXCLUDED.revision, event_id = EXCLUDED.event_id,
    billed = EXCLUDED.billed, rejected = EXCLUDED.rejected, degraded = EXCLUDED.degraded,
    acked_billed = EXCLUDED.acked_billed, data = EXCLUDED.data, frame = EXCLUDED.frame, status = 'pending',
    last_error = NULL, attempts = 0, first_attempt_at = EXCLUDED.first_attempt_at,
    last_attempt_at = EXCLUDED.last_attempt_at, maybe_stored = false, updated_at = now()`

// resendSQL marks a recorded event in flight again, at $6.
const resendSQL = `UPDATE billing_sink_events SET status = 'pending', last_attempt_at = $6, updated_at = now()
WHERE sink = $1 AND key = $2 AND period_start = $3 AND granularity = $4 AND event_id = $5`

// outcomeSQL records the sink's answer to the event recorded as event_id;
// $9: the failure may have stored it.
const outcomeSQL = `UPDATE billing_sink_events SET status = $6, acked_billed = $7, last_error = $8,
    maybe_stored = maybe_stored OR $9,
    attempts = attempts + 1, sent_at = CASE WHEN $6 = 'sent' THEN now() ELSE sent_at END, updated_at = now()
WHERE sink = $1 AND key = $2 AND period_start = $3 AND granularity = $4 AND event_id = $5`

type periodKey struct {
	key   string
	start int64
}

// load reads the sink's rows for keys and periods in [from, to).
func (p *Publisher) load(ctx context.Context, keys []string, from, to time.Time) (map[periodKey]*state, error) {
	rows, err := p.db.Query(ctx, `SELECT key, period_start, revision, event_id, billed, rejected, degraded, acked_billed, data,
    frame, status, first_attempt_at, last_attempt_at, maybe_stored
FROM billing_sink_events
WHERE sink = $1 AND granularity = $2 AND key = ANY($3) AND period_start >= $4 AND period_start < $5`,
		p.cfg.Sink, string(p.cfg.Granularity), keys, from, to)
	if err != nil {
		return nil, fmt.Errorf("sink: load: %w", err)
	}
	defer rows.Close()
	out := make(map[periodKey]*state)
	for rows.Next() {
		var key string
		var start time.Time
		var first, last *time.Time
		s := &state{}
		if err := rows.Scan(&key, &start, &s.revision, &s.eventID, &s.figures.billed, &s.figures.rejected, &s.figures.degraded,
			&s.acked, &s.data, &s.frame, &s.status, &first, &last, &s.maybeStored); err != nil {
			return nil, fmt.Errorf("sink: load: %w", err)
		}
		if first != nil {
			s.firstAttempt = *first
		}
		if last != nil {
			s.lastAttempt = *last
		}
		s.maybeStored = s.maybeStored || s.status == statusPending
		// The audit figures are in the event's data (absent, so 0, in
		// events from before net billing, whose spent was the billed
		// figure). The gross allowed cost is allowed, or spent in events
		// from before allowed was sent; events recorded since carried the
		// net as spent beside allowed, and events of this release no
		// spent at all (Data), so spent is read only when allowed is
		// absent.
		var d struct {
			Allowed   *int64 `json:"allowed"`
			Spent     int64  `json:"spent"`
			Refunded  int64  `json:"refunded"`
			Charged   int64  `json:"charged"`
			CarriedIn int64  `json:"carried_in"`
		}
		if err := json.Unmarshal(s.data, &d); err != nil {
			return nil, fmt.Errorf("sink: load: event %s data: %w", s.eventID, err)
		}
		if d.Allowed != nil {
			d.Spent = *d.Allowed
		}
		s.figures.allowed, s.figures.refunded, s.figures.charged, s.figures.carriedIn = d.Spent, d.Refunded, d.Charged, d.CarriedIn
		out[periodKey{key, start.Unix()}] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sink: load: %w", err)
	}
	return out, nil
}

// acked counts an acknowledged event of kind result ("sent",
// "correction", "resent") in st.
func (st *Stats) acked(result string) {
	switch result {
	case "sent":
		st.Sent++
	case "correction":
		st.Corrections++
	case "resent":
		st.Resent++
	}
}
