package sink_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
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
// its meter event summaries from every event it ever stored, each once
// summaryLag has passed since it arrived (by the clock).
//
// It also speaks Stripe's v2 meter event stream: POST
// /v2/billing/meter_event_session (the secret key) opens a session whose
// token lasts 15 minutes, and POST /v2/billing/meter_event_stream (that
// token) takes 1 to 100 events as JSON, answering for the request as a
// whole: 401 once the session expired, 400 for a malformed request, and
// otherwise, as Stripe processes them afterwards, storing each event
// whose identifier it has not seen within 24 hours and whose timestamp is
// within the past 35 days (others go to errorReports, Stripe's meter
// error reports). failMidway n stores only the first n events of the next
// stream request and answers 500.
type fakeStripe struct {
	srv          *httptest.Server
	dropAnswers  atomic.Bool
	down         atomic.Bool // answer every request 500, storing nothing
	tooMany      atomic.Bool // answer every request 429, storing nothing
	clk          *clock.Manual
	grace        time.Duration
	arrived      func()
	invoiced     map[string]int64     // guarded by mu: customer → Σ value on invoices not finalized when it arrived
	storedAt     map[string]time.Time // guarded by mu: identifier → arrival
	mu           sync.Mutex
	stored       map[string]fakeMeterEvent // guarded by mu: by identifier, within the dedupe window
	billed       map[string]int64          // guarded by mu: customer → Σ value of every event ever stored
	history      []fakeMeterEvent          // guarded by mu: every event ever stored
	requests     int                       // guarded by mu
	summaryLag   time.Duration
	failMidway   atomic.Int32
	sessions     map[string]time.Time // guarded by mu: token → expiry
	streamSizes  []int                // guarded by mu: events per stream request taken
	errorReports []string             // guarded by mu: stream events refused after the request
}

type fakeMeterEvent struct {
	customer  string
	value     int64
	timestamp int64
	arrived   time.Time
}

func startFakeStripe(t testing.TB) *fakeStripe {
	t.Helper()
	f := &fakeStripe{stored: map[string]fakeMeterEvent{}, billed: map[string]int64{}, invoiced: map[string]int64{},
		storedAt: map[string]time.Time{}, sessions: map[string]time.Time{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// startFakeStripeAt starts a fake Stripe keeping its time rules by clk,
// finalizing invoices grace after their UTC month ends.
func startFakeStripeAt(t testing.TB, clk *clock.Manual, grace time.Duration) *fakeStripe {
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
	switch r.URL.Path {
	case "/v2/billing/meter_event_session":
		f.serveSession(w, r)
		return
	case "/v2/billing/meter_event_stream":
		f.serveStream(w, r)
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
		f.forgetOldLocked()
		if ts := time.Unix(ev.timestamp, 0); f.clk.Now().Sub(ts) > 35*24*time.Hour {
			f.mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"Timestamp must be within the past 35 days."}}`)
			return
		}
	}
	dup := !f.storeLocked(id, ev)
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

// now is the fake's time: its clock's, or the system's.
func (f *fakeStripe) now() time.Time {
	if f.clk != nil {
		return f.clk.Now()
	}
	return time.Now()
}

// forgetOldLocked drops the identifiers stored more than 24 hours ago.
func (f *fakeStripe) forgetOldLocked() {
	now := f.now()
	for id, at := range f.storedAt {
		if now.Sub(at) > 24*time.Hour {
			delete(f.stored, id)
			delete(f.storedAt, id)
		}
	}
}

// storeLocked stores ev under id unless Stripe holds id (false).
func (f *fakeStripe) storeLocked(id string, ev fakeMeterEvent) bool {
	if _, dup := f.stored[id]; dup {
		return false
	}
	now := f.now()
	ev.arrived = now
	f.stored[id] = ev
	f.billed[ev.customer] += ev.value
	f.history = append(f.history, ev)
	if f.clk != nil {
		f.storedAt[id] = now
		ts := time.Unix(ev.timestamp, 0).UTC()
		if time.Date(ts.Year(), ts.Month()+1, 1, 0, 0, 0, 0, time.UTC).Add(f.grace).After(now) {
			f.invoiced[ev.customer] += ev.value
		}
	}
	return true
}

// v2Error answers a v2 request with status and Stripe's v2 error body.
func v2Error(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Stripe-Should-Retry", "false")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"type":%q,"code":%q,"message":%q}}`, typ, code, msg)
}

// serveSession opens a meter event session for the secret key.
func (f *fakeStripe) serveSession(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testSecret {
		v2Error(w, http.StatusUnauthorized, "invalid_request", "unauthorized", "Invalid API key")
		return
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := "ek_test_" + hex.EncodeToString(b[:])
	now := f.now()
	f.mu.Lock()
	f.sessions[token] = now.Add(15 * time.Minute)
	n := len(f.sessions)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"mes_%d","object":"v2.billing.meter_event_session","authentication_token":%q,"created":%q,"expires_at":%q,"livemode":false}`,
		n, token, now.UTC().Format(time.RFC3339), now.Add(15*time.Minute).UTC().Format(time.RFC3339))
}

// streamEvent is a meter event of a stream request.
type streamEvent struct {
	EventName  string            `json:"event_name"`
	Identifier string            `json:"identifier"`
	Payload    map[string]string `json:"payload"`
	Timestamp  time.Time         `json:"timestamp"`
}

// serveStream takes a stream request's events.
func (f *fakeStripe) serveStream(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	expires, ok := f.sessions[token]
	f.mu.Unlock()
	if !ok || !f.now().Before(expires) {
		v2Error(w, http.StatusUnauthorized, "temporary_session_expired", "billing_meter_event_session_expired",
			"The meter event session expired: create a new one.")
		return
	}
	if f.tooMany.Load() {
		v2Error(w, http.StatusTooManyRequests, "rate_limit", "rate_limit", "Too many requests")
		return
	}
	if f.down.Load() {
		v2Error(w, http.StatusInternalServerError, "internal", "internal", "internal error")
		return
	}
	var body struct {
		Events []streamEvent `json:"events"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Events) == 0 || len(body.Events) > 100 {
		v2Error(w, http.StatusBadRequest, "invalid_request", "invalid_events", "events: 1 to 100 meter events")
		return
	}
	evs := make([]fakeMeterEvent, len(body.Events))
	for i, e := range body.Events {
		value, err := strconv.ParseInt(e.Payload["value"], 10, 64)
		evs[i] = fakeMeterEvent{customer: e.Payload["stripe_customer_id"], value: value, timestamp: e.Timestamp.Unix()}
		if err != nil || e.EventName != testMeter || e.Identifier == "" || evs[i].customer == "" || e.Timestamp.IsZero() {
			v2Error(w, http.StatusBadRequest, "invalid_request", "invalid_event", fmt.Sprintf("events[%d]: bad meter event", i))
			return
		}
	}
	n := len(evs)
	midway := false
	if k := int(f.failMidway.Swap(0)); k > 0 && k < n {
		n, midway = k, true
	}
	now := f.now()
	stored := 0
	f.mu.Lock()
	f.streamSizes = append(f.streamSizes, len(evs))
	f.forgetOldLocked()
	for i, ev := range evs[:n] {
		ts := time.Unix(ev.timestamp, 0)
		if now.Sub(ts) > 35*24*time.Hour || ts.Sub(now) > 5*time.Minute {
			f.errorReports = append(f.errorReports, fmt.Sprintf("%s: timestamp %s out of range", body.Events[i].Identifier, ts.UTC()))
			continue
		}
		if f.storeLocked(body.Events[i].Identifier, ev) {
			stored++
		}
	}
	f.mu.Unlock()
	if stored > 0 && f.arrived != nil {
		f.arrived()
	}
	switch {
	case midway:
		v2Error(w, http.StatusInternalServerError, "internal", "internal", "internal error")
	case f.dropAnswers.Load():
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	}
}

// stream returns a meter event stream sending to the fake, its sessions
// timed by the fake's clock.
func (f *fakeStripe) stream() *sink.StripeStream {
	var clk clock.Clock
	if f.clk != nil {
		clk = f.clk
	}
	return sink.NewStripeStream(testSecret, f.srv.URL, &http.Client{Timeout: 5 * time.Second}, clk)
}

// streamRequests returns the events of each stream request taken.
func (f *fakeStripe) streamRequests() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.streamSizes)
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
		if ev.customer == customer && ev.timestamp >= start && ev.timestamp < end && !ev.arrived.Add(f.summaryLag).After(f.now()) {
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
