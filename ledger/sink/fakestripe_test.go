package sink_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger/sink"
)

// fakeStripe speaks Stripe's meter-events endpoint over real HTTP: it
// stores each identifier's event once, answers a repeated identifier
// with Stripe's duplicate-identifier error (HTTP 400, "An event already
// exists with identifier …"), and, while dropAnswers is set, stores the
// event and then closes the connection without answering (the answer
// lost on the way back). forget models Stripe's dedupe window passing.
//
// With a clock (startFakeStripeAt), it also keeps Stripe's time rules by
// that clock: an identifier is remembered 24 hours, a timestamp more than
// 35 days old is refused, and an event counts on an invoice (invoiced)
// only if it arrives before the invoice holding its timestamp (the UTC
// month) is finalized, grace after the month's end; arrived is called
// after each stored event (a slow Stripe advances the clock there).
// tooMany answers 429, storing nothing. It lists one meter and answers
// its meter event summaries from every event it ever stored.
type fakeStripe struct {
	srv         *httptest.Server
	dropAnswers atomic.Bool
	down        atomic.Bool // answer every request 500, storing nothing
	tooMany     atomic.Bool // answer every request 429, storing nothing
	clk         *clock.Manual
	grace       time.Duration
	arrived     func()
	invoiced    map[string]int64     // guarded by mu: customer → Σ value on invoices not finalized when it arrived
	storedAt    map[string]time.Time // guarded by mu: identifier → arrival
	mu          sync.Mutex
	stored      map[string]fakeMeterEvent // guarded by mu: by identifier, within the dedupe window
	billed      map[string]int64          // guarded by mu: customer → Σ value of every event ever stored
	history     []fakeMeterEvent          // guarded by mu: every event ever stored
	requests    int                       // guarded by mu
}

type fakeMeterEvent struct {
	customer  string
	value     int64
	timestamp int64
}

func startFakeStripe(t *testing.T) *fakeStripe {
	t.Helper()
	f := &fakeStripe{stored: map[string]fakeMeterEvent{}, billed: map[string]int64{}, invoiced: map[string]int64{},
		storedAt: map[string]time.Time{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// startFakeStripeAt starts a fake Stripe keeping its time rules by clk,
// finalizing invoices grace after their UTC month ends.
func startFakeStripeAt(t *testing.T, clk *clock.Manual, grace time.Duration) *fakeStripe {
	t.Helper()
	f := startFakeStripe(t)
	f.clk, f.grace = clk, grace
	return f
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		f.serveRead(w, r)
		return
	}
	if f.tooMany.Load() {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Stripe-Should-Retry", "false")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/billing/meter_events" || r.ParseForm() != nil {
		http.Error(w, `{"error":{"type":"invalid_request_error","message":"unknown request"}}`, http.StatusNotFound)
		return
	}
	if f.down.Load() {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Stripe-Should-Retry", "false")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"type":"api_error","message":"internal error"}}`)
		return
	}
	id := r.PostForm.Get("identifier")
	value, verr := strconv.ParseInt(r.PostForm.Get("payload[value]"), 10, 64)
	ts, terr := strconv.ParseInt(r.PostForm.Get("timestamp"), 10, 64)
	ev := fakeMeterEvent{customer: r.PostForm.Get("payload[stripe_customer_id]"), value: value, timestamp: ts}
	if id == "" || verr != nil || terr != nil || ev.customer == "" || r.PostForm.Get("event_name") != testMeter {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"bad meter event"}}`)
		return
	}
	f.mu.Lock()
	f.requests++
	if f.clk != nil {
		now := f.clk.Now()
		for id, at := range f.storedAt {
			if now.Sub(at) > 24*time.Hour {
				delete(f.stored, id)
				delete(f.storedAt, id)
			}
		}
		if ts := time.Unix(ev.timestamp, 0); now.Sub(ts) > 35*24*time.Hour {
			f.mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"Timestamp must be within the past 35 days."}}`)
			return
		}
	}
	_, dup := f.stored[id]
	if !dup {
		f.stored[id] = ev
		f.billed[ev.customer] += ev.value
		f.history = append(f.history, ev)
		if f.clk != nil {
			now := f.clk.Now()
			f.storedAt[id] = now
			ts := time.Unix(ev.timestamp, 0).UTC()
			if time.Date(ts.Year(), ts.Month()+1, 1, 0, 0, 0, 0, time.UTC).Add(f.grace).After(now) {
				f.invoiced[ev.customer] += ev.value
			}
		}
	}
	f.mu.Unlock()
	if !dup && f.arrived != nil {
		f.arrived()
	}
	if f.dropAnswers.Load() {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if dup {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":"An event already exists with identifier %s."}}`, id)
		return
	}
	fmt.Fprintf(w, `{"object":"billing.meter_event","event_name":%q,"identifier":%q,"timestamp":%d,"payload":{}}`,
		testMeter, id, ts)
}

// serveRead answers the meter list (one meter, testMeter, id mtr_test)
// and its event summaries: one summary of the customer's events with
// timestamps in [start_time, end_time).
func (f *fakeStripe) serveRead(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/billing/meters":
		fmt.Fprintf(w, `{"object":"list","url":"/v1/billing/meters","has_more":false,"data":[{"id":"mtr_test","object":"billing.meter","event_name":%q}]}`,
			testMeter)
		return
	case "/v1/billing/meters/mtr_test/event_summaries":
	default:
		http.Error(w, `{"error":{"type":"invalid_request_error","message":"unknown request"}}`, http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	start, serr := strconv.ParseInt(q.Get("start_time"), 10, 64)
	end, eerr := strconv.ParseInt(q.Get("end_time"), 10, 64)
	customer := q.Get("customer")
	if serr != nil || eerr != nil || customer == "" || start%60 != 0 || end%60 != 0 {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"bad summary request"}}`)
		return
	}
	f.mu.Lock()
	var sum int64
	for _, ev := range f.history {
		if ev.customer == customer && ev.timestamp >= start && ev.timestamp < end {
			sum += ev.value
		}
	}
	f.mu.Unlock()
	fmt.Fprintf(w, `{"object":"list","url":"/v1/billing/meters/mtr_test/event_summaries","has_more":false,"data":[`+
		`{"id":"sum_1","object":"billing.meter_event_summary","aggregated_value":%d,"start_time":%d,"end_time":%d,"meter":"mtr_test"}]}`,
		sum, start, end)
}

// summaries returns the meter event summaries of the fake, through a
// Stripe client.
func (f *fakeStripe) summaries() sink.MeterSummaries {
	return sink.NewStripeSummaries(sink.NewStripeClient(testSecret, f.srv.URL, &http.Client{Timeout: 5 * time.Second}), testMeter)
}

// forget drops every identifier: Stripe's 24-hour dedupe window passed.
func (f *fakeStripe) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.stored)
}

// invoicedTo returns Σ value on customer's invoices: events that arrived
// before the invoice of their timestamp was finalized.
func (f *fakeStripe) invoicedTo(customer string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.invoiced[customer]
}

// billedBy returns Σ value Stripe billed customer, and the requests seen.
func (f *fakeStripe) billedBy(customer string) (int64, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.billed[customer], f.requests
}

// events returns a Stripe client's meter events sending to the fake
// (stripe-go retries a dropped answer itself, which is dropped again).
func (f *fakeStripe) events() sink.MeterEvents {
	return sink.NewStripeClient(testSecret, f.srv.URL, &http.Client{Timeout: 5 * time.Second}).V1BillingMeterEvents
}
