package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/ledger/export"
)

// ErrSinkRefused: the sink did not acknowledge an event; the run stopped
// there and the next run sends it again.
var ErrSinkRefused = errors.New("sink: event not acknowledged")

// Config describes one sink.
type Config struct {
	// Sink names the sink in billing_sink_events and in metrics (a URL
	// without credentials, or "nats:<subject>"). Required.
	Sink string
	// Source and Type are the CloudEvents attributes; defaults
	// DefaultSource and DefaultType.
	Source, Type string
	// Granularity of the periods sent; default month.
	Granularity export.Granularity
	// SendTimeout bounds one event's delivery. Default 10s.
	SendTimeout time.Duration
	Metrics     *Metrics     // nil: none
	Logger      *slog.Logger // nil discards; keys are logged at debug only
	// Skip, if set, is asked about each closed period the sink does not
	// hold with the ledger's figures (unsent, refused or changed), before
	// anything is sent for it; held is the billed figure the sink holds for
	// it (0 if nothing was acknowledged). True leaves the period unsent and
	// unrecorded, counted in Stats.Skipped, and asked again next run. Run
	// calls it from its own goroutine. Nil skips nothing.
	Skip func(r export.Row, held int64) bool
}

// Stats counts what a run did.
type Stats struct {
	Sent        int // first events of a period
	Corrections int // events replacing an earlier one
	Resent      int // unacknowledged events sent again
	Unchanged   int // closed periods already sent with these figures
	Open        int // periods not complete yet, not sent
	Skipped     int // closed periods Config.Skip held back
	// Difference is, over the run's range, the closed periods' billed
	// figures in the ledger minus what the sink acknowledged, after the
	// run.
	Difference int64
}

// Publisher sends closed periods to one sink.
type Publisher struct {
	db   *pgxpool.Pool
	ex   *export.Exporter
	send Sender
	cfg  Config
}

// NewPublisher returns a Publisher that reads the ledger with ex, records
// in db (which must be writable) and delivers with send. It validates a
// copy of cfg.
func NewPublisher(db *pgxpool.Pool, ex *export.Exporter, send Sender, cfg Config) (*Publisher, error) {
	var errs []error
	if cfg.Sink == "" {
		errs = append(errs, errors.New("sink: Config.Sink is required"))
	}
	g, err := export.ParseGranularity(string(cfg.Granularity))
	if err != nil {
		errs = append(errs, fmt.Errorf("sink: Config.Granularity: %w", err))
	}
	cfg.Granularity = g
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.Type == "" {
		cfg.Type = DefaultType
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = 10 * time.Second
	}
	if cfg.SendTimeout < 0 {
		errs = append(errs, fmt.Errorf("sink: Config.SendTimeout must be positive, got %v", cfg.SendTimeout))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if db == nil || ex == nil || send == nil {
		errs = append(errs, errors.New("sink: NewPublisher needs a pool, an Exporter and a Sender"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Publisher{db: db, ex: ex, send: send, cfg: cfg}, nil
}

// state is a billing_sink_events row. Its spent column holds the billed
// figure of the latest event (before net billing the billed figure was
// the gross spent, so rows written then compare correctly), acked_spent
// the billed figure the sink acknowledged.
type state struct {
	revision int
	eventID  string
	figures  figures // of the latest event
	acked    int64   // billed figure the sink holds
	data     json.RawMessage
	sent     bool
}

// figures are what an event says about its period: a period whose
// figures changed gets a correction. Net and CarriedOut follow from them.
type figures struct {
	billed, spent, refunded, charged, carriedIn, rejected, degraded int64
}

func rowFigures(r *export.Row) figures {
	return figures{billed: r.Billed, spent: r.Spent, refunded: r.Refunded, charged: r.Charged, carriedIn: r.CarriedIn,
		rejected: r.Rejected, degraded: r.Degraded}
}

// Run sends every closed period in [from, to) (period starts) that the
// sink does not hold with the ledger's current figures, and updates the
// difference gauge. It stops at the first event the sink refuses
// (ErrSinkRefused), having recorded it.
func (p *Publisher) Run(ctx context.Context, from, to, now time.Time) (Stats, error) {
	var st Stats
	q := export.Query{From: from, To: to, Granularity: p.cfg.Granularity, Now: now}
	err := p.ex.Export(ctx, q, func(rows []export.Row) error {
		states, err := p.load(ctx, rows[0].Key, rows[len(rows)-1].Key, from, to)
		if err != nil {
			return err
		}
		for i := range rows {
			r := &rows[i]
			if !r.Complete {
				st.Open++
				continue
			}
			if err := p.period(ctx, r, states[periodKey{r.Key, r.PeriodStart.Unix()}], &st); err != nil {
				return err
			}
		}
		return nil
	})
	diff, derr := p.difference(ctx, from, to, now)
	if derr == nil {
		st.Difference = diff
		p.cfg.Metrics.setDifference(p.cfg.Sink, diff)
	}
	return st, errors.Join(err, derr)
}

// period brings the sink up to date for one closed period.
func (p *Publisher) period(ctx context.Context, r *export.Row, s *state, st *Stats) error {
	if p.skip(r, s) {
		st.Skipped++
		return nil
	}
	if s != nil && !s.sent {
		if err := p.deliver(ctx, r, s.revision, s.eventID, s.data, s.figures, s.acked); err != nil {
			return err
		}
		st.Resent++
		p.cfg.Metrics.count(p.cfg.Sink, "resent")
		s.sent, s.acked = true, s.figures.billed
	}
	switch {
	case s == nil:
		if err := p.sendRevision(ctx, r, 0, "", 0); err != nil {
			return err
		}
		st.Sent++
		p.cfg.Metrics.count(p.cfg.Sink, "sent")
	case s.figures == rowFigures(r):
		st.Unchanged++
	default:
		if err := p.sendRevision(ctx, r, s.revision+1, s.eventID, s.figures.billed); err != nil {
			return err
		}
		st.Corrections++
		p.cfg.Metrics.count(p.cfg.Sink, "correction")
	}
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
	if s.sent && s.figures == rowFigures(r) {
		return false
	}
	return p.cfg.Skip(*r, s.acked)
}

// sendRevision builds and delivers revision rev of r's period; prevBilled
// is what the replaced revision billed, which the sink holds.
func (p *Publisher) sendRevision(ctx context.Context, r *export.Row, rev int, replaces string, prevBilled int64) error {
	delta := r.Billed - prevBilled
	d, err := json.Marshal(Data{Key: r.Key, PeriodStart: r.PeriodStart, PeriodEnd: r.PeriodEnd, Granularity: p.cfg.Granularity,
		Billed: r.Billed, Spent: r.Spent, Refunded: r.Refunded, Charged: r.Charged, Net: r.Net,
		CarriedIn: r.CarriedIn, CarriedOut: r.CarriedOut, Rejected: r.Rejected, Degraded: r.Degraded, Windows: r.Windows,
		ClosedByReconciler: r.ClosedByReconciler, Revision: rev, Replaces: replaces, PreviousBilled: prevBilled, BilledDelta: delta,
		PreviousSpent: prevBilled, SpentDelta: delta})
	if err != nil {
		return fmt.Errorf("sink: event data: %w", err)
	}
	id := EventID(r.Key, r.PeriodStart, p.cfg.Granularity, rev)
	return p.deliver(ctx, r, rev, id, d, rowFigures(r), prevBilled)
}

// deliver sends one event and records the outcome: acknowledged, the sink
// holds f.billed; refused, it still holds prevAcked and the event is sent
// again next run.
func (p *Publisher) deliver(ctx context.Context, r *export.Row, rev int, id string, data json.RawMessage,
	f figures, prevAcked int64) error {
	ev, err := newEvent(p.cfg.Source, p.cfg.Type, id, data, r.Key, r.PeriodEnd)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
	sendErr := p.send.Send(sctx, ev)
	cancel()
	status, acked, lastErr := "sent", f.billed, ""
	if sendErr != nil {
		status, acked, lastErr = "failed", prevAcked, sendErr.Error()
		p.cfg.Metrics.count(p.cfg.Sink, "failed")
		p.cfg.Logger.Debug("sink refused an event", "sink", p.cfg.Sink, "key", r.Key, "period", r.PeriodStart, "err", sendErr)
	}
	_, err = p.db.Exec(ctx, upsertSQL, p.cfg.Sink, r.Key, r.PeriodStart, string(p.cfg.Granularity), r.PeriodEnd,
		rev, id, f.billed, f.rejected, f.degraded, acked, data, status, nullable(lastErr))
	if err != nil {
		return fmt.Errorf("sink: record event: %w", err)
	}
	if sendErr != nil {
		return fmt.Errorf("%w: %w", ErrSinkRefused, sendErr)
	}
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const upsertSQL = `INSERT INTO billing_sink_events AS e
    (sink, key, period_start, granularity, period_end, revision, event_id, spent, rejected, degraded,
     acked_spent, data, status, last_error, sent_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, CASE WHEN $13 = 'sent' THEN now() END)
ON CONFLICT (sink, key, period_start, granularity) DO UPDATE SET
    period_end = EXCLUDED.period_end, revision = EXCLUDED.revision, event_id = EXCLUDED.event_id,
    spent = EXCLUDED.spent, rejected = EXCLUDED.rejected, degraded = EXCLUDED.degraded,
    acked_spent = EXCLUDED.acked_spent, data = EXCLUDED.data, status = EXCLUDED.status,
    last_error = EXCLUDED.last_error,
    attempts = CASE WHEN e.event_id = EXCLUDED.event_id THEN e.attempts + 1 ELSE 1 END,
    sent_at = coalesce(EXCLUDED.sent_at, e.sent_at), updated_at = now()`

type periodKey struct {
	key   string
	start int64
}

// load reads the sink's rows for the keys in [lo, hi] and periods in
// [from, to).
func (p *Publisher) load(ctx context.Context, lo, hi string, from, to time.Time) (map[periodKey]*state, error) {
	rows, err := p.db.Query(ctx, `SELECT key, period_start, revision, event_id, spent, rejected, degraded, acked_spent, data, status = 'sent'
FROM billing_sink_events
WHERE sink = $1 AND granularity = $2 AND key >= $3 AND key <= $4 AND period_start >= $5 AND period_start < $6`,
		p.cfg.Sink, string(p.cfg.Granularity), lo, hi, from, to)
	if err != nil {
		return nil, fmt.Errorf("sink: load: %w", err)
	}
	defer rows.Close()
	out := make(map[periodKey]*state)
	for rows.Next() {
		var key string
		var start time.Time
		s := &state{}
		if err := rows.Scan(&key, &start, &s.revision, &s.eventID, &s.figures.billed, &s.figures.rejected, &s.figures.degraded,
			&s.acked, &s.data, &s.sent); err != nil {
			return nil, fmt.Errorf("sink: load: %w", err)
		}
		// The audit figures are in the event's data (absent, so 0, in
		// events from before net billing, whose spent was the billed
		// figure).
		var d struct {
			Spent     int64 `json:"spent"`
			Refunded  int64 `json:"refunded"`
			Charged   int64 `json:"charged"`
			CarriedIn int64 `json:"carried_in"`
		}
		if err := json.Unmarshal(s.data, &d); err != nil {
			return nil, fmt.Errorf("sink: load: event %s data: %w", s.eventID, err)
		}
		s.figures.spent, s.figures.refunded, s.figures.charged, s.figures.carriedIn = d.Spent, d.Refunded, d.Charged, d.CarriedIn
		out[periodKey{key, start.Unix()}] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sink: load: %w", err)
	}
	return out, nil
}
