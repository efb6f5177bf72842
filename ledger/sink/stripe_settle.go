package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/stripe/stripe-go/v84"
)

// MeterSummaries reads what Stripe holds of a meter for a customer: the
// sum of its meter events with timestamps in [start, end), both on
// minute boundaries (Stripe's meter event summaries).
type MeterSummaries interface {
	Sum(ctx context.Context, customer string, start, end time.Time) (int64, error)
}

// StripeSummaries reads one meter's event summaries through a Stripe
// client; it finds the meter's id by its event_name on first use.
type StripeSummaries struct {
	client *stripe.Client
	meter  string
	mu     sync.Mutex
	id     string // guarded by mu: "" until found
}

var _ MeterSummaries = (*StripeSummaries)(nil)

// NewStripeSummaries returns the summaries of the meter whose event_name
// is meter.
func NewStripeSummaries(client *stripe.Client, meter string) *StripeSummaries {
	return &StripeSummaries{client: client, meter: meter}
}

// Sum returns the aggregated value of customer's events in [start, end).
func (s *StripeSummaries) Sum(ctx context.Context, customer string, start, end time.Time) (int64, error) {
	id, err := s.meterID(ctx)
	if err != nil {
		return 0, err
	}
	var sum float64
	for ev, err := range s.client.V1BillingMeterEventSummaries.List(ctx, &stripe.BillingMeterEventSummaryListParams{
		ID: stripe.String(id), Customer: stripe.String(customer), StartTime: stripe.Int64(start.Unix()),
		EndTime: stripe.Int64(end.Unix())}) {
		if err != nil {
			return 0, fmt.Errorf("sink: stripe: meter event summaries: %w", err)
		}
		sum += ev.AggregatedValue
	}
	if sum != math.Trunc(sum) || math.Abs(sum) > 1<<53 {
		return 0, fmt.Errorf("sink: stripe: meter event summary %v is not a whole count", sum)
	}
	return int64(sum), nil
}

func (s *StripeSummaries) meterID(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" {
		return s.id, nil
	}
	for m, err := range s.client.V1BillingMeters.List(ctx, &stripe.BillingMeterListParams{}) {
		if err != nil {
			return "", fmt.Errorf("sink: stripe: list meters: %w", err)
		}
		if m.EventName == s.meter {
			s.id = m.ID
			return s.id, nil
		}
	}
	return "", fmt.Errorf("sink: stripe: no meter with event_name %q", s.meter)
}

// errUndecided: the summaries cannot tell whether Stripe holds an event.
var errUndecided = errors.New("sink: stripe: the meter event summaries cannot decide")

// Stored reports whether Stripe holds the event framed as frame, judged
// by the meter event summaries (decided false when they cannot tell, or
// without StripeConfig.Summaries).
func (s *Stripe) Stored(ctx context.Context, ev cloudevents.Event, frame json.RawMessage) (stored, decided bool, err error) {
	stored, err = s.stored(ctx, ev, frame)
	if errors.Is(err, errUndecided) {
		return false, false, nil
	}
	return stored, err == nil, err
}

// stored decides, from the meter event summaries, whether Stripe holds
// the event framed as frame. It compares the customer's summary over the
// minute of the frame's timestamp with what this sink's records say
// Stripe holds there: the other events of that customer stamped in that
// minute, acknowledged. The difference is the event's value (held) or 0
// (not held); anything else, an unsettled event of the same customer in
// that minute, or a period corrected since (its earlier revisions'
// timestamps are not recorded), is errUndecided: a person settles it.
func (s *Stripe) stored(ctx context.Context, ev cloudevents.Event, frame json.RawMessage) (bool, error) {
	if s.summaries == nil || s.records == nil {
		return false, errUndecided
	}
	var f stripeFrame
	if err := json.Unmarshal(frame, &f); err != nil {
		return false, fmt.Errorf("sink: stripe: bad recorded frame %s: %w", frame, err)
	}
	start := time.Unix(f.Timestamp, 0).Truncate(time.Minute)
	end := start.Add(time.Minute)
	var known int64
	var unsure int
	// Rows of the customer stamped in the minute, or whose period's first
	// event would have been (its end − 1s): a corrected period's earlier
	// revisions are not recorded, so it leaves the minute undecided.
	err := s.records.QueryRow(ctx, `WITH m AS (
    SELECT revision, status, maybe_stored, (frame->>'value')::bigint AS value,
           (frame->>'timestamp')::bigint >= $4 AND (frame->>'timestamp')::bigint < $5 AS inside
    FROM billing_sink_events
    WHERE sink = $1 AND event_id <> $2 AND frame->>'customer' = $3
      AND (((frame->>'timestamp')::bigint >= $4 AND (frame->>'timestamp')::bigint < $5)
        OR (period_end - interval '1 second' >= to_timestamp($4) AND period_end - interval '1 second' < to_timestamp($5))))
SELECT coalesce(sum(value) FILTER (WHERE inside AND status = 'sent' AND revision = 0), 0)::bigint,
       count(*) FILTER (WHERE revision > 0 OR status = 'pending' OR (inside AND status <> 'sent' AND maybe_stored))
FROM m`,
		s.sinkName, ev.ID(), f.Customer, start.Unix(), end.Unix()).Scan(&known, &unsure)
	if err != nil {
		return false, fmt.Errorf("sink: stripe: records of the minute: %w", err)
	}
	if unsure > 0 {
		return false, errUndecided
	}
	sum, err := s.summaries.Sum(ctx, f.Customer, start, end)
	if err != nil {
		return false, err
	}
	switch sum - known {
	case f.Value:
		return true, nil
	case 0:
		return false, nil
	}
	return false, errUndecided
}
