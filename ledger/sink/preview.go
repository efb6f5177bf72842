package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v84"

	"github.com/quotaplatform/quota/ledger/export"
)

// PlannedEvent is an event the next run of a sink would send, if the sink
// acknowledged each one. Cost units.
type PlannedEvent struct {
	Sink        string    `json:"sink"`
	Customer    string    `json:"customer"` // the frame's customer (Stripe); the key for a sink without frames
	Key         string    `json:"key"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	Revision    int       `json:"revision"`
	EventID     string    `json:"event_id"`
	Kind        string    `json:"kind"`   // first, correction, or resend (an unacknowledged event, as recorded)
	Billed      int64     `json:"billed"` // the period's billed figure in the event
	// Value is what the sink is sent: Stripe's meter event value (the
	// period's billed figure, or a correction's change); Billed for a
	// sink without frames.
	Value int64 `json:"value"`
	// Timestamp and Identifier are a Stripe meter event's (zero and ""
	// for a sink without frames).
	Timestamp  time.Time `json:"timestamp"`
	Identifier string    `json:"identifier"`
}

// Preview is what Run would do over [from, to) at now, computed by Run's
// own code with nothing recorded and nothing sent: no row written, no
// request to the sink, no lock beyond its reads. The run's outbox and
// books are swapped for a plan and read-only books (effects.go), so the
// run has no preview branch, and each of its statements runs in a
// read-only transaction of its own (readOnlyDB), so that a write that
// does not go through them fails the preview instead of writing. An
// event whose fate a run would ask the sink about (Settler) is listed
// held. Stats are the run's as if every event were acknowledged, with
// the difference and unsent figures of the sink as it stands.
func (p *Publisher) Preview(ctx context.Context, from, to, now time.Time) ([]PlannedEvent, Stats, error) {
	dry := *p
	dry.db, dry.pool = readOnlyDB{p.pool}, nil
	dry.cfg.Metrics = nil
	plan := &plannedOutbox{p: &dry, events: []PlannedEvent{}}
	dry.out, dry.books = plan, readOnlyBooks{p: &dry}
	st, err := dry.Run(ctx, from, to, now)
	return plan.events, st, err
}

// plannedOutbox is a Preview's outbox: it lists each event as the run
// would send it and sends and records nothing.
type plannedOutbox struct {
	p      *Publisher
	events []PlannedEvent
}

func (pl *plannedOutbox) add(_ context.Context, o outgoing, st *Stats) error {
	e := PlannedEvent{Sink: pl.p.cfg.Sink, Customer: o.key, Key: o.key, PeriodStart: o.start, PeriodEnd: o.end,
		Revision: o.rev, EventID: o.id, Kind: "resend", Billed: o.f.billed, Value: o.f.billed}
	switch {
	case o.fresh && o.rev == 0:
		e.Kind = "first"
	case o.fresh:
		e.Kind = "correction"
	}
	if o.frame != nil {
		var sf stripeFrame
		if err := json.Unmarshal(o.frame, &sf); err != nil {
			return fmt.Errorf("sink: preview: frame %s: %w", o.frame, err)
		}
		e.Customer, e.Value, e.Timestamp, e.Identifier = sf.Customer, sf.Value, time.Unix(sf.Timestamp, 0).UTC(), sf.Identifier
	}
	pl.events = append(pl.events, e)
	st.acked(o.result) // as the run would count it once acknowledged
	return nil
}

func (pl *plannedOutbox) flush(context.Context, *Stats) error { return nil }

func (pl *plannedOutbox) drop() {}

// stored: a preview asks the sink nothing, so an event whose fate the
// run would ask about is listed held.
func (pl *plannedOutbox) stored(context.Context, Settler, cloudevents.Event, json.RawMessage) (bool, bool, error) {
	return false, false, nil
}

// readOnlyBooks is a Preview's books: it reads what a run reads and
// writes nothing. It takes no lock, and reads no stored carry, since it
// cannot drop the ones a change made stale.
type readOnlyBooks struct{ p *Publisher }

func (b readOnlyBooks) open(ctx context.Context, want registration) (time.Time, func(), error) {
	watermark, err := registered(ctx, b.p.db, b.p.cfg.Sink, want)
	return watermark, func() {}, err
}

func (b readOnlyBooks) changedKeys(ctx context.Context, args ...any) ([]string, error) {
	return queryKeys(ctx, b.p, candidatesSQL, args...)
}

func (readOnlyBooks) dropCarries(context.Context) error { return nil }

func (readOnlyBooks) carries(_, _, _ time.Time) *carryWriter { return nil }

func (readOnlyBooks) legacyFramed(context.Context, *export.Row, string, json.RawMessage) error {
	return nil
}

func (readOnlyBooks) restamped(context.Context, *export.Row, string, json.RawMessage, time.Time) error {
	return nil
}

func (readOnlyBooks) held(context.Context, *export.Row, *state, string) error { return nil }

func (readOnlyBooks) settled(context.Context, *export.Row, *state) error { return nil }

func (readOnlyBooks) advance(context.Context, time.Time) error { return nil }

func (readOnlyBooks) checkpoint(context.Context, *increment, time.Time, []string, []string) error {
	return nil
}

// readOnlyDB is a Preview's database: each statement in a read-only
// transaction of its own, rolled back once its results are read. One
// transaction for the whole preview would hold a connection the
// Exporter, on the same pool, may need (the CLI's pool has one).
type readOnlyDB struct{ pool *pgxpool.Pool }

func (d readOnlyDB) begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("sink: preview: begin a read-only transaction: %w", err)
	}
	return tx, nil
}

// end rolls tx back, even once ctx is done: it wrote nothing.
func end(ctx context.Context, tx pgx.Tx) { _ = tx.Rollback(context.WithoutCancel(ctx)) }

func (d readOnlyDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tx, err := d.begin(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer end(ctx, tx)
	return tx.Exec(ctx, sql, args...)
}

func (d readOnlyDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := d.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		end(ctx, tx)
		return nil, err
	}
	return &readOnlyRows{Rows: rows, ctx: ctx, tx: tx}, nil
}

func (d readOnlyDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	tx, err := d.begin(ctx)
	if err != nil {
		return errRow{err}
	}
	return readOnlyRow{row: tx.QueryRow(ctx, sql, args...), ctx: ctx, tx: tx}
}

func (d readOnlyDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := d.begin(ctx)
	if err != nil {
		return errBatch{err: err}
	}
	return readOnlyBatch{BatchResults: tx.SendBatch(ctx, b), ctx: ctx, tx: tx}
}

// readOnlyRows ends its transaction when read to the end or closed.
type readOnlyRows struct {
	pgx.Rows
	ctx  context.Context
	tx   pgx.Tx
	done bool
}

func (r *readOnlyRows) finish() {
	if !r.done {
		r.done = true
		r.Rows.Close()
		end(r.ctx, r.tx)
	}
}

func (r *readOnlyRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *readOnlyRows) Close() { r.finish() }

type readOnlyRow struct {
	row pgx.Row
	ctx context.Context
	tx  pgx.Tx
}

func (r readOnlyRow) Scan(dest ...any) error {
	defer end(r.ctx, r.tx)
	return r.row.Scan(dest...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type readOnlyBatch struct {
	pgx.BatchResults
	ctx context.Context
	tx  pgx.Tx
}

func (b readOnlyBatch) Close() error {
	defer end(b.ctx, b.tx)
	return b.BatchResults.Close()
}

// errBatch answers err for every result; it has no batch under it.
type errBatch struct {
	pgx.BatchResults
	err error
}

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b errBatch) Close() error                     { return b.err }

// registered is register for a Preview: it reads the sink's registration
// and refuses a run that differs, recording nothing. A field not recorded
// yet is what the next run would record.
func registered(ctx context.Context, db dbtx, sinkName string, want registration) (time.Time, error) {
	var g, cal, rule *string
	var lt *time.Time
	err := db.QueryRow(ctx, `SELECT granularity, calendar, customer_rule, looked_through FROM billing_sinks WHERE sink = $1`,
		sinkName).Scan(&g, &cal, &rule, &lt)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("sink %q: registry: %w", sinkName, err)
	}
	var diffs []string
	for _, f := range []struct {
		name      string
		got       *string
		wantValue string
	}{{"granularity", g, string(want.granularity)}, {"calendar", cal, string(want.calendar)}, {"customer rule", rule, want.customers}} {
		if f.got != nil && *f.got != f.wantValue {
			diffs = append(diffs, fmt.Sprintf("%s: first run used %s, this run asks %s", f.name, *f.got, f.wantValue))
		}
	}
	if len(diffs) > 0 {
		return time.Time{}, fmt.Errorf("%w: sink %q: %s", ErrSinkChanged, sinkName, strings.Join(diffs, "; "))
	}
	if lt != nil {
		return lt.UTC(), nil
	}
	return time.Time{}, nil
}

// noMeterEvents is the MeterEvents of a preview's Stripe sender: a
// preview never sends, and if it tried, this refuses.
type noMeterEvents struct{}

func (noMeterEvents) Create(context.Context, *stripe.BillingMeterEventCreateParams) (*stripe.BillingMeterEvent, error) {
	return nil, errors.New("sink: a preview sends nothing")
}

// PreviewStripe is what SyncStripe with cfg would send over [from, to) at
// now, per customer (Publisher.Preview), without a request to Stripe.
func PreviewStripe(ctx context.Context, db *pgxpool.Pool, ex *export.Exporter, cfg StripeConfig, from, to, now time.Time) (
	[]PlannedEvent, StripeStats, error) {
	var out StripeStats
	cfg.Summaries, cfg.Metrics = nil, nil
	p, unmapped, err := stripePublisher(ctx, db, ex, noMeterEvents{}, cfg)
	if err != nil {
		return nil, out, err
	}
	planned, st, err := p.Preview(ctx, from, to, now)
	out.Stats, out.UnmappedKeys = st, len(unmapped)
	return planned, out, err
}
