package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v84"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger/export"
)

// StripeResendWindow is how long after its first attempt an
// unacknowledged meter event is sent again: Stripe drops an identifier it
// saw within a rolling 24 hours at least, so a resend within 23 hours
// (an hour kept off for the run's length and clock skew) cannot bill
// twice; later, the event is held for a person (Stats.Held).
const StripeResendWindow = 23 * time.Hour

// DefaultStripeSettleAfter is StripeConfig.SettleAfter's default: Stripe's
// meter event summaries show an event minutes after it was stored, an hour
// leaves room for a slow aggregation.
const DefaultStripeSettleAfter = time.Hour

// Finalization grace of a Stripe invoice: Stripe finalizes an invoice an
// hour after its period ends by default, at most 72 hours, and never
// changes it afterwards.
const (
	DefaultFinalizationGrace = time.Hour
	MaxFinalizationGrace     = 72 * time.Hour
)

// StripeSinkName is the sink name of meter in billing_sink_events and
// metrics: "stripe:<meter>".
func StripeSinkName(meter string) string { return "stripe:" + meter }

// StripeIdentifier is the meter event identifier of the event eventID
// (billing_sink_events.event_id: key, period, granularity, revision) sent
// to meter for customer with value at timestamp (Unix seconds): a hash of
// all of them, so one identifier only ever names one payload, and it
// reveals nothing of the key. Stripe refuses an identifier it saw within
// 24 hours ("An event already exists with identifier …"), which for this
// identifier means it holds exactly this payload.
func StripeIdentifier(meter, eventID, customer string, value, timestamp int64) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%d", meter, eventID, customer, value, timestamp)
	return "qu-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// MeterEvents is the part of a stripe.Client that Stripe uses
// (client.V1BillingMeterEvents).
type MeterEvents interface {
	Create(ctx context.Context, params *stripe.BillingMeterEventCreateParams) (*stripe.BillingMeterEvent, error)
}

// NewStripeClient returns a Stripe client with secretKey, sending to url
// ("" for Stripe's API; a stripe-mock's URL in tests) through hc (nil: a
// client with a 30s timeout). Its own logging is off: errors come back to
// the caller, and nothing it could log carries the key.
func NewStripeClient(secretKey, url string, hc *http.Client) *stripe.Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	cfg := &stripe.BackendConfig{HTTPClient: hc, LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	if url != "" {
		cfg.URL = stripe.String(url)
	}
	return stripe.NewClient(secretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg)))
}

// Stripe is a Sender (a Framer) that turns usage events into Stripe
// billing meter events: event_name the meter, payload
// {stripe_customer_id: the key's customer, value: billed for revision 0,
// billed_delta for a correction}, identifier StripeIdentifier. The
// timestamp is the period's end − 1s while the customer's invoice period
// holding it is open (its end + FinalizationGrace is after now); past
// that, Stripe has finalized that invoice and would never bill the event,
// so it is stamped now and lands on the customer's current invoice (a
// late correction is billed, or credited, on the next invoice instead of
// being lost). The frame (customer, value, timestamp, identifier) is
// decided at the first attempt and recorded; every resend sends it
// unchanged. Stripe sums a meter's events, so a correction is a new
// event carrying the change, never a cancellation of the original; a
// negative value (a late refund) is a correction Stripe accepts. An event
// whose value is 0 (a correction of figures other than billed) is
// acknowledged without a request.
type Stripe struct {
	events    MeterEvents
	meter     string
	customers customerBook
	grace     time.Duration
	// summaries and records (the sink's billing_sink_events, as sinkName)
	// settle ambiguous outcomes (Stored); nil: a person does.
	summaries MeterSummaries
	records   rowQuerier
	sinkName  string
	// stream, if set, sends batch events a request (BatchSize); nil:
	// one v1 request per event through events.
	stream MeterEventStream
	batch  int
}

// rowQuerier is the part of a pgx pool that Stored reads records with.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ Settler     = (*Stripe)(nil)
	_ BatchFramer = (*Stripe)(nil)
)

// NewStripe returns a Sender to meter through events, with customers
// the dated mappings of keys to Stripe customers (read, never changed;
// StripeCustomerMappings) and grace the invoices' finalization grace (0:
// DefaultFinalizationGrace).
func NewStripe(events MeterEvents, meter string, customers []StripeCustomer, grace time.Duration) (*Stripe, error) {
	if events == nil || meter == "" {
		return nil, errors.New("sink: stripe: needs meter events and a meter name")
	}
	if grace == 0 {
		grace = DefaultFinalizationGrace
	}
	if grace < 0 || grace > MaxFinalizationGrace {
		return nil, fmt.Errorf("sink: stripe: finalization grace must be 0 to %v, got %v", MaxFinalizationGrace, grace)
	}
	return &Stripe{events: events, meter: meter, customers: newCustomerBook(customers), grace: grace}, nil
}

// stripeFrame is a meter event's request, recorded before its first
// attempt (billing_sink_events.frame).
type stripeFrame struct {
	Customer   string `json:"customer"`
	Value      int64  `json:"value"`
	Timestamp  int64  `json:"timestamp"`
	Identifier string `json:"identifier"`
}

// meterValue reads ev's data, the customer its meter event names and the
// value it carries: billed for revision 0, the change for a correction.
// The customer is the one prev (the frame of the event ev replaces)
// named, so a correction, a credit included, goes to the customer billed
// for the period; without prev, the one mapped at the period's last
// instant.
func (s *Stripe) meterValue(ev cloudevents.Event, prev json.RawMessage) (Data, StripeCustomer, int64, error) {
	var d Data
	if err := json.Unmarshal(ev.Data(), &d); err != nil {
		return d, StripeCustomer{}, 0, fmt.Errorf("sink: stripe: event data: %w", err)
	}
	var c StripeCustomer
	var pf stripeFrame
	if prev != nil && json.Unmarshal(prev, &pf) == nil && pf.Customer != "" {
		c = s.customers.named(d.Key, pf.Customer)
	} else {
		var ok bool
		if c, ok = s.customers.at(d.Key, d.PeriodEnd.Add(-time.Second)); !ok {
			return d, c, 0, errors.New("sink: stripe: key has no Stripe customer for the period")
		}
	}
	if d.Revision > 0 {
		return d, c, d.BilledDelta, nil
	}
	return d, c, d.Billed, nil
}

// Frame decides ev's meter event at now; prev is the recorded frame of the
// event ev replaces (nil for a period's first event).
func (s *Stripe) Frame(ev cloudevents.Event, prev json.RawMessage, now time.Time) (json.RawMessage, error) {
	d, c, value, err := s.meterValue(ev, prev)
	if err != nil {
		return nil, err
	}
	ts := d.PeriodEnd.Add(-time.Second)
	if !c.InvoicePeriodEnd(ts).Add(s.grace).After(now) {
		ts = now
	}
	f := stripeFrame{Customer: c.CustomerID, Value: value, Timestamp: ts.Unix()}
	f.Identifier = StripeIdentifier(s.meter, ev.ID(), f.Customer, f.Value, f.Timestamp)
	return json.Marshal(f)
}

// Restamp judges frame's invoice at now, the time it is about to be sent
// again: finalized (its end plus the grace is past), the event is stamped
// now, with the identifier of the new payload, and lands on the
// customer's current invoice. The customer stays the frame's.
func (s *Stripe) Restamp(ev cloudevents.Event, frame json.RawMessage, now time.Time) (json.RawMessage, bool, error) {
	var f stripeFrame
	if err := json.Unmarshal(frame, &f); err != nil || f.Identifier == "" || f.Customer == "" {
		return nil, false, fmt.Errorf("sink: stripe: bad recorded frame %s: %v", frame, err)
	}
	var d Data
	if err := json.Unmarshal(ev.Data(), &d); err != nil {
		return nil, false, fmt.Errorf("sink: stripe: event data: %w", err)
	}
	c := s.customers.named(d.Key, f.Customer)
	if f.Value == 0 || c.InvoicePeriodEnd(time.Unix(f.Timestamp, 0)).Add(s.grace).After(now) {
		return frame, false, nil
	}
	f.Timestamp = now.Unix()
	f.Identifier = StripeIdentifier(s.meter, ev.ID(), f.Customer, f.Value, f.Timestamp)
	b, err := json.Marshal(f)
	return b, true, err
}

// Definite reports whether err means Stripe stored nothing: a 4xx answer
// (429 too many requests, a refused request, an expired stream session),
// a timestamp refused before sending, or no connection at all. A
// timeout, a lost answer or a 5xx may have stored the event.
func (s *Stripe) Definite(err error) bool {
	var se *stripe.Error
	if errors.As(err, &se) {
		return se.HTTPStatusCode >= 400 && se.HTTPStatusCode < 500
	}
	var v2 *stripe.V2RawError
	if errors.As(err, &v2) {
		return v2.HTTPStatusCode >= 400 && v2.HTTPStatusCode < 500
	}
	var expired *stripe.TemporarySessionExpiredError
	return errors.As(err, &expired) || errors.Is(err, errStaleTimestamp) || errors.Is(err, syscall.ECONNREFUSED)
}

// legacyFrame is the request the code before migration 010 sent for ev,
// for an unacknowledged event recorded then without a frame: its
// identifier was a hash of (meter, event id) and its timestamp the
// period's end − 1s. Re-sending exactly that lets Stripe's dedupe drop it
// if it was stored.
func (s *Stripe) legacyFrame(ev cloudevents.Event) (json.RawMessage, error) {
	d, c, value, err := s.meterValue(ev, nil)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256([]byte(s.meter + "\x00" + ev.ID()))
	return json.Marshal(stripeFrame{Customer: c.CustomerID, Value: value, Timestamp: d.PeriodEnd.Add(-time.Second).Unix(),
		Identifier: "qu-" + hex.EncodeToString(h[:16])})
}

// Send frames ev at the current time and sends it (for callers outside a
// Publisher, which records the frame first; a correction sent this way
// names the customer mapped at its period's end).
func (s *Stripe) Send(ctx context.Context, ev cloudevents.Event) error {
	f, err := s.Frame(ev, nil, time.Now())
	if err != nil {
		return err
	}
	return s.SendFrame(ctx, ev, f)
}

// SendFrame creates the meter event frame describes. Stripe's refusal of
// a repeated identifier counts as delivered: the identifier hashes the
// payload, so Stripe holds this very event (its earlier answer was lost).
func (s *Stripe) SendFrame(ctx context.Context, _ cloudevents.Event, frame json.RawMessage) error {
	var f stripeFrame
	if err := json.Unmarshal(frame, &f); err != nil || f.Identifier == "" || f.Customer == "" {
		return fmt.Errorf("sink: stripe: bad recorded frame %s: %v", frame, err)
	}
	if f.Value == 0 {
		return nil
	}
	_, err := s.events.Create(ctx, &stripe.BillingMeterEventCreateParams{
		EventName:  stripe.String(s.meter),
		Identifier: stripe.String(f.Identifier),
		Payload:    map[string]string{"stripe_customer_id": f.Customer, "value": strconv.FormatInt(f.Value, 10)},
		Timestamp:  stripe.Int64(f.Timestamp),
	})
	if isDuplicateIdentifier(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sink: stripe: %w", err)
	}
	return nil
}

// isDuplicateIdentifier: Stripe refused a meter event because it already
// holds one with its identifier (HTTP 400, "An event already exists with
// identifier …").
func isDuplicateIdentifier(err error) bool {
	var se *stripe.Error
	return errors.As(err, &se) && se.HTTPStatusCode == http.StatusBadRequest &&
		strings.Contains(se.Msg, "already exists with identifier")
}

// StripeConfig describes one Stripe meter.
type StripeConfig struct {
	// Meter is the meter's event_name. Required.
	Meter string
	// Granularity of the periods sent; default month. Continuous runs
	// send hours, so the invoice holds each hour soon after it settles.
	Granularity export.Granularity
	// SendTimeout bounds one meter event's request. Default 10s.
	SendTimeout time.Duration
	// FinalizationGrace is how long after an invoice period ends Stripe
	// finalizes its invoice (the account's setting): an event for a
	// period whose invoice is finalized is stamped with the time it is
	// sent. Default DefaultFinalizationGrace (1h), at most
	// MaxFinalizationGrace (72h).
	FinalizationGrace time.Duration
	// Lookback is Config.Lookback (0: its default).
	Lookback time.Duration
	// Calendar is Config.Calendar (default export.CalendarUTC).
	Calendar export.Calendar
	// Clock is Config.Clock: each meter event is stamped, and its invoice
	// judged, at the time it is sent.
	Clock clock.Clock
	// Summaries, if set, settles an event an ambiguous attempt may have
	// stored once its invoice is finalized, against the meter event
	// summaries (NewStripeSummaries); nil holds it for a person.
	Summaries MeterSummaries
	// Incremental: Config.Incremental.
	Incremental bool
	// Stream, if set, sends meter events in batches through Stripe's v2
	// meter event stream (NewStripeStream), BatchSize events a request;
	// nil: one request per event to v1 /v1/billing/meter_events. Stripe
	// checks a stream's events only after accepting the request and
	// reports one it then rejects to its meter error webhook alone: such
	// an event is recorded sent and is never billed. v1 answers each.
	Stream MeterEventStream
	// BatchSize is the most events one stream request carries: 1 to
	// MaxStripeBatch (100), default DefaultStripeBatch (100).
	BatchSize int
	// SettleAfter is how long after an ambiguous attempt Summaries may
	// decide whether Stripe stored it (Config.SettleAfter): Stripe's
	// summaries lag what it stored. Default DefaultStripeSettleAfter (1h).
	SettleAfter time.Duration
	Metrics     *Metrics     // nil: none
	Logger      *slog.Logger // nil discards
}

// StripeStats counts what a SyncStripe run did.
type StripeStats struct {
	Stats
	// UnmappedKeys counts keys with closed periods to send but no Stripe
	// customer: none of their periods was sent or recorded.
	UnmappedKeys int
}

// SyncStripe sends the closed periods in [from, to) (period starts), and
// earlier ones that changed back to cfg.Lookback, of every key mapped in
// stripe_customers to cfg.Meter through events, recording in db's
// billing_sink_events under StripeSinkName(cfg.Meter), as Publisher.Run
// does for any sink: a rerun sends only unsent or changed periods, a late
// change sends one correction (the delta), and the first refusal stops
// the run (ErrSinkRefused) with the event recorded failed, to be resent
// first next run, unchanged, within StripeResendWindow of its first
// attempt (later it is held, Stats.Held). Keys without a customer are
// skipped and counted.
func SyncStripe(ctx context.Context, db *pgxpool.Pool, ex *export.Exporter, events MeterEvents, cfg StripeConfig,
	from, to, now time.Time) (StripeStats, error) {
	var out StripeStats
	p, unmapped, err := stripePublisher(ctx, db, ex, events, cfg)
	if err != nil {
		return out, err
	}
	out.Stats, err = p.Run(ctx, from, to, now)
	out.UnmappedKeys = len(unmapped)
	return out, err
}

// stripePublisher is the Publisher of SyncStripe and PreviewStripe, and
// the keys its Skip found without a customer, filled as it runs.
func stripePublisher(ctx context.Context, db *pgxpool.Pool, ex *export.Exporter, events MeterEvents, cfg StripeConfig) (
	*Publisher, map[string]bool, error) {
	mappings, err := StripeCustomerMappings(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	send, err := NewStripe(events, cfg.Meter, mappings, cfg.FinalizationGrace)
	if err != nil {
		return nil, nil, err
	}
	send.summaries, send.records, send.sinkName = cfg.Summaries, db, StripeSinkName(cfg.Meter)
	if cfg.Stream != nil {
		if cfg.BatchSize == 0 {
			cfg.BatchSize = DefaultStripeBatch
		}
		if cfg.BatchSize < 1 || cfg.BatchSize > MaxStripeBatch {
			return nil, nil, fmt.Errorf("sink: stripe: BatchSize must be 1 to %d, got %d", MaxStripeBatch, cfg.BatchSize)
		}
		send.stream, send.batch = cfg.Stream, cfg.BatchSize
	}
	if cfg.SettleAfter == 0 {
		cfg.SettleAfter = DefaultStripeSettleAfter
	}
	unmapped := make(map[string]bool)
	skip := func(r export.Row, held int64) bool {
		if _, ok := send.customers.at(r.Key, r.PeriodEnd.Add(-time.Second)); !ok {
			unmapped[r.Key] = true
			return true
		}
		return false
	}
	p, err := NewPublisher(db, ex, send, Config{Sink: StripeSinkName(cfg.Meter), Granularity: cfg.Granularity,
		Calendar: cfg.Calendar, Customers: CustomersDated, Clock: cfg.Clock, SendTimeout: cfg.SendTimeout, Metrics: cfg.Metrics, Logger: cfg.Logger, Skip: skip, Lookback: cfg.Lookback,
		ResendWindow: StripeResendWindow, Incremental: cfg.Incremental, SettleAfter: cfg.SettleAfter})
	return p, unmapped, err
}
