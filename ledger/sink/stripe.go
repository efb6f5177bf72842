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
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v84"

	"github.com/quotaplatform/quota/ledger/export"
)

// StripeMaxAge is how old a meter event's timestamp may be: Stripe accepts
// timestamps within the past 35 calendar days (and up to 5 minutes ahead).
// A period whose timestamp (its end − 1s) is older than StripeMaxAge −
// StripeAgeMargin is not sent: SyncStripe lists it in StripeStats.TooOld
// for a person to bill by hand.
const StripeMaxAge = 35 * 24 * time.Hour

// StripeAgeMargin is kept off StripeMaxAge for the run's own duration and
// clock skew with Stripe.
const StripeAgeMargin = time.Hour

// StripeSinkName is the sink name of meter in billing_sink_events and
// metrics: "stripe:<meter>".
func StripeSinkName(meter string) string { return "stripe:" + meter }

// StripeIdentifier is the meter event identifier of revision rev of key's
// period starting at start, sent to meter: a hash of (meter, key, start,
// granularity, rev), stable across runs, that reveals nothing of the key.
// Stripe drops an event whose identifier it saw within a rolling 24 hours
// at least, so a resend (after a refusal or a timeout) within a day is a
// no-op there.
func StripeIdentifier(meter, key string, start time.Time, g export.Granularity, rev int) string {
	return stripeIdentifier(meter, EventID(key, start, g, rev))
}

// stripeIdentifier derives the identifier from the CloudEvents id
// (billing_sink_events.event_id), which already covers key, period,
// granularity and revision.
func stripeIdentifier(meter, eventID string) string {
	h := sha256.Sum256([]byte(meter + "\x00" + eventID))
	return "qu-" + hex.EncodeToString(h[:16])
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

// Stripe is a Sender that turns usage events into Stripe billing meter
// events: event_name the meter, payload {stripe_customer_id: the key's
// customer, value: billed for revision 0, billed_delta for a correction},
// timestamp the period's end − 1s, identifier StripeIdentifier. Stripe
// sums a meter's events, so a correction is a new event carrying the
// change, never a cancellation of the original (Stripe cancels only within
// 24 hours of an event; a late report usually comes later). A correction
// that lowers a period's billed figure (a late refund) is a negative
// value, which Stripe accepts as a correction; a period's events sum to
// its billed figure, never below zero. An event whose value is 0 (a
// correction of figures other than billed) is acknowledged without a
// request: Stripe's sum would not change.
type Stripe struct {
	events    MeterEvents
	meter     string
	customers map[string]string
}

var _ Sender = (*Stripe)(nil)

// NewStripe returns a Sender to meter through events, with customers
// mapping keys to Stripe customer ids (read, never changed).
func NewStripe(events MeterEvents, meter string, customers map[string]string) (*Stripe, error) {
	if events == nil || meter == "" {
		return nil, errors.New("sink: stripe: needs meter events and a meter name")
	}
	return &Stripe{events: events, meter: meter, customers: customers}, nil
}

// Send creates ev's meter event.
func (s *Stripe) Send(ctx context.Context, ev cloudevents.Event) error {
	var d Data
	if err := json.Unmarshal(ev.Data(), &d); err != nil {
		return fmt.Errorf("sink: stripe: event data: %w", err)
	}
	customer, ok := s.customers[d.Key]
	if !ok {
		return errors.New("sink: stripe: key has no Stripe customer")
	}
	value := d.Billed
	if d.Revision > 0 {
		value = d.BilledDelta
	}
	if value == 0 {
		return nil
	}
	_, err := s.events.Create(ctx, &stripe.BillingMeterEventCreateParams{
		EventName:  stripe.String(s.meter),
		Identifier: stripe.String(stripeIdentifier(s.meter, ev.ID())),
		Payload:    map[string]string{"stripe_customer_id": customer, "value": strconv.FormatInt(value, 10)},
		Timestamp:  stripe.Int64(d.PeriodEnd.Add(-time.Second).Unix()),
	})
	if err != nil {
		return fmt.Errorf("sink: stripe: %w", err)
	}
	return nil
}

// StripeConfig describes one Stripe meter.
type StripeConfig struct {
	// Meter is the meter's event_name. Required.
	Meter string
	// Granularity of the periods sent; default month.
	Granularity export.Granularity
	// SendTimeout bounds one meter event's request. Default 10s.
	SendTimeout time.Duration
	Metrics     *Metrics     // nil: none
	Logger      *slog.Logger // nil discards
}

// StripeStats counts what a SyncStripe run did.
type StripeStats struct {
	Stats
	// UnmappedKeys counts keys with closed periods to send but no Stripe
	// customer: none of their periods was sent or recorded.
	UnmappedKeys int
	// TooOld lists closed periods Stripe does not hold with the ledger's
	// figures but would refuse (timestamp older than StripeMaxAge): not
	// sent, for a person to settle.
	TooOld []StalePeriod
}

// StalePeriod is a closed period too old to send. Cost units.
type StalePeriod struct {
	Key         string
	PeriodStart time.Time
	Billed      int64 // what the ledger bills for it (export.Row.Billed)
	Held        int64 // what Stripe holds for it (acknowledged)
}

// SyncStripe sends the closed periods in [from, to) (period starts) of
// every key mapped in stripe_customers to cfg.Meter through events,
// recording in db's billing_sink_events under StripeSinkName(cfg.Meter),
// as Publisher.Run does for any sink: a rerun sends only unsent or changed
// periods, a late change sends one correction (the delta), and the first
// refusal stops the run (ErrSinkRefused) with the event recorded failed,
// to be resent first next run. Keys without a customer are skipped and
// counted; periods past Stripe's window are listed, not sent.
func SyncStripe(ctx context.Context, db *pgxpool.Pool, ex *export.Exporter, events MeterEvents, cfg StripeConfig,
	from, to, now time.Time) (StripeStats, error) {
	var out StripeStats
	customers, err := stripeCustomerMap(ctx, db)
	if err != nil {
		return out, err
	}
	send, err := NewStripe(events, cfg.Meter, customers)
	if err != nil {
		return out, err
	}
	unmapped := make(map[string]bool)
	oldest := now.Add(-(StripeMaxAge - StripeAgeMargin))
	skip := func(r export.Row, held int64) bool {
		if _, ok := customers[r.Key]; !ok {
			unmapped[r.Key] = true
			return true
		}
		if r.PeriodEnd.Add(-time.Second).Before(oldest) {
			out.TooOld = append(out.TooOld, StalePeriod{Key: r.Key, PeriodStart: r.PeriodStart, Billed: r.Billed,
				Held: held})
			return true
		}
		return false
	}
	p, err := NewPublisher(db, ex, send, Config{Sink: StripeSinkName(cfg.Meter), Granularity: cfg.Granularity,
		SendTimeout: cfg.SendTimeout, Metrics: cfg.Metrics, Logger: cfg.Logger, Skip: skip})
	if err != nil {
		return out, err
	}
	out.Stats, err = p.Run(ctx, from, to, now)
	out.UnmappedKeys = len(unmapped)
	return out, err
}
