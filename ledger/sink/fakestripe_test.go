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

	"github.com/quotaplatform/quota/ledger/sink"
)

// fakeStripe speaks Stripe's meter-events endpoint over real HTTP: it
// stores each identifier's event once, answers a repeated identifier
// with Stripe's duplicate-identifier error (HTTP 400, "An event already
// exists with identifier …"), and, while dropAnswers is set, stores the
// event and then closes the connection without answering (the answer
// lost on the way back). forget models Stripe's dedupe window passing.
type fakeStripe struct {
	srv         *httptest.Server
	dropAnswers atomic.Bool
	down        atomic.Bool // answer every request 500, storing nothing
	mu          sync.Mutex
	stored      map[string]fakeMeterEvent // guarded by mu: by identifier, within the dedupe window
	billed      map[string]int64          // guarded by mu: customer → Σ value of every event ever stored
	requests    int                       // guarded by mu
}

type fakeMeterEvent struct {
	customer  string
	value     int64
	timestamp int64
}

func startFakeStripe(t *testing.T) *fakeStripe {
	t.Helper()
	f := &fakeStripe{stored: map[string]fakeMeterEvent{}, billed: map[string]int64{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
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
	_, dup := f.stored[id]
	if !dup {
		f.stored[id] = ev
		f.billed[ev.customer] += ev.value
	}
	f.mu.Unlock()
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

// forget drops every identifier: Stripe's 24-hour dedupe window passed.
func (f *fakeStripe) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.stored)
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
