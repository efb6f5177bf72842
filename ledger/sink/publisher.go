package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/clock"

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
	// Calendar cuts each key's periods (export.Query.Calendar): default
	// export.CalendarUTC; export.CalendarPlan sends each key its plan's
	// periods (time_zone, anchor_day). It is fixed on the sink's first
	// run. On the plan calendar the periods a sink recorded are frozen
	// (export.Query.Frozen): a key's plan change cuts only what follows
	// the last period sent.
	Calendar export.Calendar
	// Clock, if set, gives the time of each send: what a Framer stamps and
	// judges finalization by, and a resend window is measured to; Run's
	// now still decides which periods are complete. Nil: every send of a
	// run at Run's now (a pass that outlasts an invoice's finalization
	// grace then stamps its last events by its start).
	Clock clock.Clock
	// SendTimeout bounds one event's delivery. Default 10s.
	SendTimeout time.Duration
	Metrics     *Metrics     // nil: none
	Logger      *slog.Logger // nil discards; keys are logged at debug only
	// Customers is the rule that names a period's customer, fixed on the
	// sink's first run: CustomersByKey (default) or CustomersDated.
	Customers string
	// Skip, if set, is asked about each closed period the sink does not
	// hold with the ledger's figures (unsent, refused or changed), before
	// anything is sent for it; held is the billed figure the sink holds for
	// it (0 if nothing was acknowledged). True leaves the period unsent and
	// unrecorded, counted in Stats.Skipped, and asked again next run. Run
	// calls it from its own goroutine. Nil skips nothing.
	Skip func(r export.Row, held int64) bool
	// Lookback is how far before a run's from it also corrects: every
	// period starting in [from − Lookback, from) whose sink state differs
	// from the ledger (unsent, failed, pending, changed) is brought up to
	// date, so a month the schedule no longer names is still corrected.
	// Default DefaultLookback (62 days: Stripe's 35-day window and a
	// month); with hour periods DefaultHourLookback, and never further
	// back than export.MaxHours before the run's to (an export's hour
	// limit); negative: none.
	Lookback time.Duration
	// ResendWindow is how long after its first attempt an unacknowledged
	// event may be sent again: the sink's deduplication window (Stripe
	// keeps identifiers at least 24 hours; StripeResendWindow). Past it,
	// the event is held (status 'held', Stats.Held, the held gauge) for a
	// person to settle, since a resend could bill twice. 0: no window
	// (for a receiver that keeps the ids it saw for longer than any
	// outage lasts).
	ResendWindow time.Duration
	// SettleAfter is how long after its last attempt an event an
	// ambiguous attempt may have stored waits before the sink's records
	// (Settler) decide it: the records may lag (Stripe's summaries). Until
	// then it is neither re-sent nor held (Stats.Unsettled). 0: at once.
	SettleAfter time.Duration
	// Incremental makes each run after the sink's first read only the
	// keys that may have changed since the previous successful run
	// (incremental.go; billing_sinks.checkpoint_xid, migration 017), for
	// continuous passes: the differences are computed from the rows the
	// run read. A run that fails leaves the checkpoint, so the next reads
	// at least as much. False: every run reads every key.
	Incremental bool
}

// Config.Lookback's defaults. An hour slice's invoice stays open at most
// MaxFinalizationGrace after its month, so three days of hours catch
// every slice a correction can still reach in place.
const (
	DefaultLookback     = 62 * 24 * time.Hour
	DefaultHourLookback = 72 * time.Hour
)

// Stats counts what a run did.
type Stats struct {
	Sent        int // first events of a period
	Corrections int // events replacing an earlier one
	Resent      int // unacknowledged events sent again
	Restamped   int // of those, sent with a new timestamp: their invoice was finalized meanwhile (Restamper)
	Settled     int // events an ambiguous attempt may have stored, decided by the sink's records (Settler)
	Unsettled   int // maybe-delivered events younger than Config.SettleAfter: decided by a later pass
	Unchanged   int // closed periods already sent with these figures
	Open        int // periods not complete yet, not sent
	Skipped     int // closed periods Config.Skip held back
	Retained    int // closed periods acknowledged and removed by retention (Retain): not sent again
	// Requests is the number of requests made to the sink: one per event,
	// or per batch of a BatchFramer.
	Requests int
	// KeysRead is the number of keys an incremental pass read (-1: every
	// key; 0 outside Config.Incremental).
	KeysRead int
	// Held lists the run's range's events not acknowledged within
	// Config.ResendWindow of their first attempt: not sent again, for a
	// person to settle.
	Held []HeldEvent
	// HeldTotal counts the sink's held events, Unsent its events not
	// acknowledged (pending, failed or held), however old their periods;
	// OldestUnsent is the earliest end of such a period (zero: none).
	HeldTotal, Unsent int
	OldestUnsent      time.Time
	// SkippedKeys counts keys with a period Config.Skip held back (Stripe:
	// no customer) that the ledger bills: counted here, not in
	// KeysDiffering, since no run will send them until someone acts.
	SkippedKeys int
	// Difference is, over the run's range (lookback included), the sum
	// over keys and periods of KeyDifference.Difference after the run:
	// ledger minus acknowledged, for closed periods and re-opened ones.
	// A key the sink over-holds hides another's unsent usage in it:
	// judge by KeysDiffering and AbsDifference.
	Difference int64
	// KeysDiffering counts the keys with a period whose ledger figure and
	// acknowledged figure differ, after the run (KeyDifferences);
	// AbsDifference sums those differences' absolute values.
	KeysDiffering int
	AbsDifference int64
}

// HeldEvent is an event held past the sink's dedupe window. Cost units.
type HeldEvent struct {
	Key          string
	PeriodStart  time.Time
	EventID      string
	Revision     int
	Billed       int64 // the held event's billed figure
	Acked        int64 // what the sink is known to hold for the period
	FirstAttempt time.Time
}

// Publisher sends closed periods to one sink.
type Publisher struct {
	// pool holds the sink's lock; db is where a run reads and records:
	// the pool, or a Preview's read-only transaction.
	pool *pgxpool.Pool
	db   sinkDB
	ex   *export.Exporter
	send Sender
	cfg  Config
	// out sends a run's events and records their attempts; books writes
	// the rest of the sink's bookkeeping (effects.go). A Preview swaps
	// both for ones that write and send nothing.
	out   outbox
	books books
	// retained is the sink's retained_before: one Run at a time uses it,
	// under the sink's lock.
	retained time.Time
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
	cal, err := export.ParseCalendar(string(cfg.Calendar))
	if err != nil {
		errs = append(errs, fmt.Errorf("sink: Config.Calendar: %w", err))
	}
	cfg.Calendar = cal
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.Type == "" {
		cfg.Type = DefaultType
	}
	if cfg.Customers == "" {
		cfg.Customers = CustomersByKey
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = 10 * time.Second
	}
	if cfg.Lookback == 0 {
		cfg.Lookback = DefaultLookback
		if cfg.Granularity == export.Hour {
			cfg.Lookback = DefaultHourLookback
		}
	}
	if cfg.ResendWindow < 0 {
		errs = append(errs, fmt.Errorf("sink: Config.ResendWindow must not be negative, got %v", cfg.ResendWindow))
	}
	if cfg.SettleAfter < 0 {
		errs = append(errs, fmt.Errorf("sink: Config.SettleAfter must not be negative, got %v", cfg.SettleAfter))
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
	p := &Publisher{pool: db, db: db, ex: ex, send: send, cfg: cfg}
	p.out, p.books = &pgOutbox{p: p}, pgBooks{p: p}
	return p, nil
}

// Run sends every closed period in [from, to) (period starts), and every
// earlier one back to Config.Lookback, that the sink does not hold with
// the ledger's current figures, and updates the difference gauges. It
// holds the sink's lock for its whole length (ErrRunning if another run
// has it), and refuses a run whose granularity, calendar or customer rule
// differ from the sink's first run (ErrSinkChanged). It also reads back
// to the sink's watermark (billing_sinks.looked_through), however far, so
// periods that settled while no run ran are never left behind the
// lookback. It stops at the first event the sink refuses (ErrSinkRefused),
// having recorded it; an event held past Config.ResendWindow does not
// stop it. The held and unsent gauges count the sink's whole table, not
// the run's range.
func (p *Publisher) Run(ctx context.Context, from, to, now time.Time) (Stats, error) {
	var st Stats
	watermark, release, err := p.books.open(ctx, registration{p.cfg.Granularity, p.cfg.Calendar, p.cfg.Customers})
	if err != nil {
		return st, err
	}
	defer release()
	// A refused or unanswered event is sent again however old its
	// period: the run reads back to the oldest.
	var retry *time.Time
	if err := p.db.QueryRow(ctx, `SELECT min(period_start) FROM billing_sink_events
WHERE sink = $1 AND granularity = $2 AND status IN ('pending', 'failed')`, p.cfg.Sink, string(p.cfg.Granularity)).Scan(&retry); err != nil {
		return st, fmt.Errorf("sink: oldest event to resend: %w", err)
	}
	if retry != nil && (watermark.IsZero() || retry.Before(watermark)) {
		watermark = *retry
	}
	runFrom := from
	from = p.reach(from, to, watermark)
	// Retention removed the acknowledged rows of periods that ended by
	// retained: they are not read again, and never sent (period), unless
	// an event to resend is older.
	if p.retained, err = retainedBefore(ctx, p.db, p.cfg.Sink); err != nil {
		return st, err
	}
	if !p.retained.IsZero() && from.Before(p.retained) && (retry == nil || !retry.Before(p.retained)) {
		from = p.retained
		if p.cfg.Calendar == export.CalendarUTC {
			from = p.cfg.Granularity.Start(from)
		}
		if from.After(to) {
			from = to
		}
	}
	var inc *increment
	if p.cfg.Incremental {
		if inc, err = p.changes(ctx, from, now); err != nil {
			return st, err
		}
	}
	// open is the earliest start of a period read incomplete: the
	// watermark can move up to it, no further.
	open := to
	if inc != nil && inc.keys != nil {
		// A key not read may have a period open since a pass before: an
		// incremental pass moves the watermark no further than its
		// lookback's start.
		open = runFrom.Add(-max(p.cfg.Lookback, 0))
	}
	skipped := make(map[periodKey]bool)
	var diffs []KeyDifference // the differences of the keys read (incremental)
	q := export.Query{From: from, To: to, Granularity: p.cfg.Granularity, Calendar: p.cfg.Calendar, Now: now, Frozen: p.cfg.Sink}
	var carries *carryWriter
	if inc != nil {
		// Start each key from the carry a pass stored (the stale ones were
		// deleted by changes), and store the carries this pass reads past.
		if carries = p.books.carries(from, to, now); carries != nil {
			q.Carry = p.cfg.Sink
		}
	}
	if inc != nil {
		q.Keys = inc.keys
		st.KeysRead = -1
		if inc.keys != nil {
			st.KeysRead = len(inc.keys)
		}
	}
	if q.Keys != nil && len(q.Keys) == 0 {
		err = nil // nothing changed: nothing to read
	} else {
		err = exportSpans(ctx, p.ex, q, func(rows []export.Row) (err error) {
			if carries != nil {
				if err := carries.write(ctx, rows); err != nil {
					return err
				}
			}
			states, err := p.load(ctx, pageKeys(rows), from, to)
			if err != nil {
				return err
			}
			defer func() {
				if inc != nil && inc.keys != nil && err == nil {
					diffs, err = p.pageDifferences(ctx, rows, from, to, diffs)
				}
			}()
			for i := range rows {
				r := &rows[i]
				if !r.Complete {
					st.Open++
					if r.PeriodStart.Before(open) {
						open = r.PeriodStart
					}
					continue
				}
				pk := periodKey{r.Key, r.PeriodStart.Unix()}
				before := st.Skipped
				if err := p.period(ctx, r, states[pk], p.sendTime(now), &st); err != nil {
					p.out.drop() // not recorded yet: nothing of them was sent
					return err
				}
				if st.Skipped > before {
					skipped[pk] = true
				}
			}
			return p.out.flush(ctx, &st)
		})
	}
	if err == nil {
		err = p.books.advance(ctx, open)
	}
	uerr := p.unsent(ctx, now, &st)
	var derr error
	switch {
	case inc == nil || inc.keys == nil:
		diffs, derr = KeyDifferences(ctx, p.db, p.cfg.Sink, p.cfg.Granularity, p.cfg.Calendar, from, to, now)
	case err != nil:
		// The pass stopped part way: the keys it did not reach are
		// compared as a full pass would, over the keys it meant to read.
		diffs, derr = p.keyDifferences(ctx, q)
	}
	var revisit []string
	if derr == nil {
		unmapped := make(map[string]bool)
		kept := diffs[:0]
		for _, d := range diffs {
			if d.Status == "" && d.Complete && d.PeriodStart.Before(p.retained) {
				continue // acknowledged, its row removed by retention
			}
			revisit = append(revisit, d.Key)
			if skipped[periodKey{d.Key, d.PeriodStart.Unix()}] {
				unmapped[d.Key] = true
				continue
			}

			st.Difference += d.Difference()
			kept = append(kept, d)
		}
		st.SkippedKeys = len(unmapped)
		st.KeysDiffering, st.AbsDifference = keysDiffering(kept)
		p.cfg.Metrics.setDifference(p.cfg.Sink, st.Difference, st.KeysDiffering, st.AbsDifference, st.SkippedKeys)
	}
	var cerr error
	if inc != nil && err == nil && uerr == nil && derr == nil {
		for pk := range skipped {
			revisit = append(revisit, pk.key)
		}
		cerr = p.books.checkpoint(ctx, inc, now, inc.keys, revisit)
	}
	return st, errors.Join(err, uerr, derr, cerr)
}

// keyDifferences is KeyDifferences over q (its keys).
func (p *Publisher) keyDifferences(ctx context.Context, q export.Query) ([]KeyDifference, error) {
	var out []KeyDifference
	err := exportSpans(ctx, p.ex, q, func(rows []export.Row) error {
		var err error
		out, err = p.pageDifferences(ctx, rows, q.From, q.To, out)
		return err
	})
	return out, err
}

// reach is where a run over [from, to) starts reading: Config.Lookback
// before from (for hours, no further back than an export's hour limit
// before to), or the sink's watermark (or the oldest period with an event
// to resend) if that is earlier.
func (p *Publisher) reach(from, to, watermark time.Time) time.Time {
	early := from
	if p.cfg.Lookback > 0 {
		early = from.Add(-p.cfg.Lookback)
		if p.cfg.Granularity == export.Hour {
			early = later(early, to.Add(-export.MaxHours*time.Hour))
		}
	}
	if !watermark.IsZero() && watermark.Before(early) {
		early = watermark
	}
	// On the plan calendar a range bound is any instant (a key's period
	// belongs to it if it starts in the range); on UTC's it must be a
	// period start.
	if p.cfg.Calendar == export.CalendarUTC {
		early = p.cfg.Granularity.Start(early)
	}
	if early.Before(from) {
		return early
	}
	return from
}

// unsent sets Stats' whole-table figures and the held and unsent gauges:
// every event of the sink not acknowledged, however old its period.
func (p *Publisher) unsent(ctx context.Context, now time.Time, st *Stats) error {
	var oldest *time.Time
	err := p.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'held'), count(*), min(period_end)
FROM billing_sink_events WHERE sink = $1 AND status <> 'sent'`, p.cfg.Sink).Scan(&st.HeldTotal, &st.Unsent, &oldest)
	if err != nil {
		return fmt.Errorf("sink: count unsent events: %w", err)
	}
	if oldest != nil {
		st.OldestUnsent = oldest.UTC()
	}
	p.cfg.Metrics.setUnsent(p.cfg.Sink, st.HeldTotal, st.Unsent, st.OldestUnsent, now)
	return nil
}

// exportSpans exports q in as many queries as an export's span limits
// need (MaxHours hours, MaxPeriods days or months each).
func exportSpans(ctx context.Context, ex *export.Exporter, q export.Query, page func([]export.Row) error) error {
	g, err := export.ParseGranularity(string(q.Granularity))
	if err != nil {
		return err
	}
	for a, to := q.From, q.To; a.Before(to); {
		b := to
		switch g {
		case export.Hour:
			b = a.Add(export.MaxHours * time.Hour)
		case export.Day:
			b = a.AddDate(0, 0, export.MaxPeriods)
		default:
			b = a.AddDate(0, export.MaxPeriods, 0)
		}
		if b.After(to) {
			b = to
		}
		q.From, q.To = a, b
		if err := ex.Export(ctx, q, page); err != nil {
			return err
		}
		a = b
	}
	return nil
}

// sendTime is the time of a send in a run at now.
func (p *Publisher) sendTime(now time.Time) time.Time {
	if p.cfg.Clock != nil {
		return p.cfg.Clock.Now()
	}
	return now
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
