package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/stripe/stripe-go/v84"

	"github.com/quotaplatform/quota/clock"
)

// Batches of Stripe's v2 meter event stream: a request carries at most
// MaxStripeBatch events; StripeConfig.BatchSize defaults to it.
const (
	MaxStripeBatch     = 100
	DefaultStripeBatch = MaxStripeBatch
)

// stripeTimestampWindow is how old a meter event's timestamp may be:
// Stripe refuses older ones (35 days; the v2 stream only in an error
// report afterwards, so the stream refuses them before sending).
const stripeTimestampWindow = 35 * 24 * time.Hour

// errStaleTimestamp: a frame's timestamp is older than Stripe accepts;
// nothing was sent for it.
var errStaleTimestamp = errors.New("sink: stripe: meter event timestamp older than Stripe's 35 days")

// MeterEventStream sends meter events in one request of Stripe's v2 meter
// event stream (POST /v2/billing/meter_event_stream), at most
// MaxStripeBatch of them; nil means Stripe took every one.
type MeterEventStream interface {
	SendEvents(ctx context.Context, events []*stripe.V2BillingMeterEventStreamCreateEventParams) error
}

// StripeStream is a MeterEventStream through Stripe's API. The stream is
// authenticated by a meter event session (POST
// /v2/billing/meter_event_session, with the secret key), whose token lasts
// 15 minutes: it is renewed a minute before it expires, by clk, and once
// more when Stripe answers that it expired (which stores nothing).
type StripeStream struct {
	backends *stripe.Backends
	sessions *stripe.Client // with the secret key
	clk      clock.Clock
	mu       sync.Mutex
	stream   *stripe.Client // guarded by mu: with the session's token; nil: none yet
	expires  time.Time      // guarded by mu
}

var _ MeterEventStream = (*StripeStream)(nil)

// NewStripeStream returns the meter event stream of the account of
// secretKey, at url ("" Stripe) through hc (nil: a client with a 30s
// timeout), its sessions timed by clk (nil: the system clock).
func NewStripeStream(secretKey, url string, hc *http.Client, clk clock.Clock) *StripeStream {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	if clk == nil {
		clk = clock.System()
	}
	cfg := &stripe.BackendConfig{HTTPClient: hc, LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	if url != "" {
		cfg.URL = stripe.String(url)
	}
	b := stripe.NewBackendsWithConfig(cfg)
	return &StripeStream{backends: b, sessions: stripe.NewClient(secretKey, stripe.WithBackends(b)), clk: clk}
}

// SendEvents sends events in one stream request.
func (s *StripeStream) SendEvents(ctx context.Context, events []*stripe.V2BillingMeterEventStreamCreateEventParams) error {
	if len(events) > MaxStripeBatch {
		return fmt.Errorf("sink: stripe: %d events in one stream request, at most %d", len(events), MaxStripeBatch)
	}
	for try := 0; ; try++ {
		c, err := s.session(ctx)
		if err != nil {
			return err
		}
		err = c.V2BillingMeterEventStreams.Create(ctx, &stripe.V2BillingMeterEventStreamCreateParams{
			Events: events})
		var expired *stripe.TemporarySessionExpiredError
		if errors.As(err, &expired) && try == 0 {
			s.mu.Lock()
			s.stream = nil
			s.mu.Unlock()
			continue
		}
		if err != nil {
			return fmt.Errorf("sink: stripe: meter event stream: %w", err)
		}
		return nil
	}
}

// session returns a client holding a session token valid for at least a
// minute more.
func (s *StripeStream) session(ctx context.Context) (*stripe.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream != nil && s.clk.Now().Add(time.Minute).Before(s.expires) {
		return s.stream, nil
	}
	sess, err := s.sessions.V2BillingMeterEventSessions.Create(ctx, &stripe.V2BillingMeterEventSessionCreateParams{})
	if err != nil {
		return nil, fmt.Errorf("sink: stripe: meter event session: %w", err)
	}
	if sess.AuthenticationToken == "" {
		return nil, errors.New("sink: stripe: meter event session without a token")
	}
	s.stream, s.expires = stripe.NewClient(sess.AuthenticationToken, stripe.WithBackends(s.backends)), sess.ExpiresAt
	return s.stream, nil
}

// BatchSize is how many meter events one request carries: the stream's
// batch, or 1 (one v1 request each) without a stream.
func (s *Stripe) BatchSize() int {
	if s.stream == nil {
		return 1
	}
	return s.batch
}

// SendFrames sends the meter events frames describe in one stream
// request (requests: 1, or 0 when none needed sending); errs[i] is frame
// i's outcome. A frame whose value is 0 is
// acknowledged without being sent, one whose timestamp Stripe would
// refuse is refused here (definitely: nothing sent). The stream answers
// for the request as a whole: a refusal or a lost answer is every sent
// frame's. Stripe drops an identifier it saw within 24 hours, so a resent
// frame Stripe holds is not billed twice.
func (s *Stripe) SendFrames(ctx context.Context, _ []cloudevents.Event, frames []json.RawMessage, now time.Time) (errs []error, requests int) {
	errs = make([]error, len(frames))
	var batch []*stripe.V2BillingMeterEventStreamCreateEventParams
	var sent []int
	for i, frame := range frames {
		var f stripeFrame
		if err := json.Unmarshal(frame, &f); err != nil || f.Identifier == "" || f.Customer == "" {
			errs[i] = fmt.Errorf("sink: stripe: bad recorded frame %s: %v", frame, err)
			continue
		}
		ts := time.Unix(f.Timestamp, 0).UTC()
		switch {
		case f.Value == 0:
			continue
		case now.Sub(ts) > stripeTimestampWindow:
			errs[i] = fmt.Errorf("%w: %s", errStaleTimestamp, ts.Format(time.RFC3339))
			continue
		}
		batch = append(batch, &stripe.V2BillingMeterEventStreamCreateEventParams{
			EventName:  stripe.String(s.meter),
			Identifier: stripe.String(f.Identifier),
			Payload:    map[string]string{"stripe_customer_id": f.Customer, "value": strconv.FormatInt(f.Value, 10)},
			Timestamp:  &ts,
		})
		sent = append(sent, i)
	}
	if len(batch) == 0 {
		return errs, 0
	}
	if err := s.stream.SendEvents(ctx, batch); err != nil {
		for _, i := range sent {
			errs[i] = err
		}
	}
	return errs, 1
}
