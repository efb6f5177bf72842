package multiregion

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
)

// FakeStripe speaks the part of Stripe's API the ledger's Stripe sink
// uses, over real HTTP, keeping Stripe's rules by a clock the scenario
// sets (its sink passes' time): POST /v1/billing/meter_events stores an
// event once per identifier within 24 hours (a repeat answers Stripe's
// duplicate-identifier 400), refuses a timestamp more than 35 days old,
// and puts the event on its customer's invoice of the UTC month of its
// timestamp if that invoice is not finalized yet (Grace after the month
// ends); GET /v1/billing/meters lists one meter and its event_summaries
// sum the customer's stored events by timestamp. While Down, every
// request answers 500 and stores nothing.
type FakeStripe struct {
	URL   string
	Meter string
	Grace time.Duration
	Down  atomic.Bool

	clk *clock.Manual

	mu       sync.Mutex
	seen     map[string]time.Time           // identifier → arrival, within 24 h; guarded by mu
	invoices map[string]map[time.Time]int64 // customer → invoice month → Σ value; guarded by mu
	late     map[string]int64               // customer → Σ value that arrived after its invoice was finalized; guarded by mu
	events   []fakeMeterEvent               // every stored event; guarded by mu
	stored   map[string]bool                // every identifier ever stored; guarded by mu
	answers  map[int]int                    // HTTP status → count of meter event requests; guarded by mu
}

type fakeMeterEvent struct {
	customer  string
	value     int64
	timestamp int64
}

// StartFakeStripe starts a fake Stripe for meter, keeping time by clk and
// finalizing each invoice grace after its month ends; it stops when the
// test ends.
func StartFakeStripe(t testing.TB, meter string, clk *clock.Manual, grace time.Duration) *FakeStripe {
	t.Helper()
	f := &FakeStripe{Meter: meter, Grace: grace, clk: clk, seen: map[string]time.Time{},
		invoices: map[string]map[time.Time]int64{}, late: map[string]int64{}, stored: map[string]bool{}, answers: map[int]int{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func stripeError(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Stripe-Should-Retry", "false")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"type":%q,"message":%q}}`, kind, msg)
}

func (f *FakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	if f.Down.Load() {
		if r.Method == http.MethodPost {
			f.count(http.StatusInternalServerError)
		}
		stripeError(w, http.StatusInternalServerError, "api_error", "internal error")
		return
	}
	if r.Method == http.MethodGet {
		f.serveRead(w, r)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/billing/meter_events" || r.ParseForm() != nil {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "unknown request")
		return
	}
	id := r.PostForm.Get("identifier")
	value, verr := strconv.ParseInt(r.PostForm.Get("payload[value]"), 10, 64)
	ts, terr := strconv.ParseInt(r.PostForm.Get("timestamp"), 10, 64)
	ev := fakeMeterEvent{customer: r.PostForm.Get("payload[stripe_customer_id]"), value: value, timestamp: ts}
	if id == "" || verr != nil || terr != nil || ev.customer == "" || r.PostForm.Get("event_name") != f.Meter {
		f.count(http.StatusBadRequest)
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "bad meter event")
		return
	}
	now := f.clk.Now()
	at := time.Unix(ts, 0).UTC()
	f.mu.Lock()
	for k, when := range f.seen {
		if now.Sub(when) > 24*time.Hour {
			delete(f.seen, k)
		}
	}
	if now.Sub(at) > 35*24*time.Hour {
		f.answers[http.StatusBadRequest]++
		f.mu.Unlock()
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "Timestamp must be within the past 35 days.")
		return
	}
	if _, dup := f.seen[id]; dup {
		f.answers[http.StatusBadRequest]++
		f.mu.Unlock()
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "An event already exists with identifier "+id+".")
		return
	}
	f.seen[id], f.stored[id] = now, true
	f.events = append(f.events, ev)
	month := time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	if month.AddDate(0, 1, 0).Add(f.Grace).After(now) {
		if f.invoices[ev.customer] == nil {
			f.invoices[ev.customer] = map[time.Time]int64{}
		}
		f.invoices[ev.customer][month] += value
	} else {
		f.late[ev.customer] += value
	}
	f.answers[http.StatusOK]++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"object":"billing.meter_event","event_name":%q,"identifier":%q,"timestamp":%d,"payload":{}}`, f.Meter, id, ts)
}

func (f *FakeStripe) count(status int) {
	f.mu.Lock()
	f.answers[status]++
	f.mu.Unlock()
}

// serveRead answers the meter list (one meter, id mtr_fake) and its
// event summaries: one summary of the customer's stored events with
// timestamps in [start_time, end_time), both on minute boundaries.
func (f *FakeStripe) serveRead(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/billing/meters":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","url":"/v1/billing/meters","has_more":false,"data":[{"id":"mtr_fake","object":"billing.meter","event_name":%q}]}`, f.Meter)
		return
	case "/v1/billing/meters/mtr_fake/event_summaries":
	default:
		stripeError(w, http.StatusNotFound, "invalid_request_error", "unknown request")
		return
	}
	q := r.URL.Query()
	start, serr := strconv.ParseInt(q.Get("start_time"), 10, 64)
	end, eerr := strconv.ParseInt(q.Get("end_time"), 10, 64)
	customer := q.Get("customer")
	if serr != nil || eerr != nil || customer == "" || start%60 != 0 || end%60 != 0 {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "bad summary request")
		return
	}
	f.mu.Lock()
	var sum int64
	for _, ev := range f.events {
		if ev.customer == customer && ev.timestamp >= start && ev.timestamp < end {
			sum += ev.value
		}
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"object":"list","url":"/v1/billing/meters/mtr_fake/event_summaries","has_more":false,"data":[`+
		`{"id":"sum_1","object":"billing.meter_event_summary","aggregated_value":%d,"start_time":%d,"end_time":%d,"meter":"mtr_fake"}]}`,
		sum, start, end)
}

// Holds reports whether Stripe ever stored an event with identifier: what
// a person settling a held event reads in Stripe's dashboard.
func (f *FakeStripe) Holds(identifier string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stored[identifier]
}

// Invoices returns, per customer, the invoices' totals by month (UTC
// month start), and per customer what arrived after its invoice was
// finalized (billed nowhere).
func (f *FakeStripe) Invoices() (invoices map[string]map[time.Time]int64, late map[string]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	invoices, late = map[string]map[time.Time]int64{}, map[string]int64{}
	for c, m := range f.invoices {
		invoices[c] = map[time.Time]int64{}
		for p, v := range m {
			invoices[c][p] = v
		}
	}
	for c, v := range f.late {
		late[c] = v
	}
	return invoices, late
}

// Answers counts the meter event requests by HTTP status.
func (f *FakeStripe) Answers() map[int]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]int{}
	for k, v := range f.answers {
		out[k] = v
	}
	return out
}
