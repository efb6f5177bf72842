package sink_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/ledger/sink"
)

// writeNet writes one final report with refunds and charges.
func (e *env) writeNet(t *testing.T, key, proc string, start time.Time, spent, refunded, charged int64) {
	t.Helper()
	rep := ledger.Report{Key: key, WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: proc, Region: "eu",
		Spent: spent, Refunded: refunded, Charged: charged, Final: true, Seq: 1, SentAt: start}
	if _, err := reconcile.NewWriter(e.pool).Write(context.Background(), []ledger.Report{rep}); err != nil {
		t.Fatal(err)
	}
}

// ledgerNet is Σ net and Σ billed per key over [from, to), from the export.
func (e *env) ledgerNet(t *testing.T, g export.Granularity, from, to, now time.Time) (net, billed map[string]int64) {
	t.Helper()
	net, billed = map[string]int64{}, map[string]int64{}
	err := e.ex.Export(context.Background(), export.Query{From: from, To: to, Granularity: g, Now: now}, func(rows []export.Row) error {
		for _, r := range rows {
			net[r.Key] += r.Net
			billed[r.Key] += r.Billed
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return net, billed
}

// The CloudEvents sink bills net with carry-over: each period's events sum
// to its billed figure (never below zero), a rerun sends nothing, a late
// refund to a period already sent sends one correction (a negative
// billed_delta), a late change that moves the credit carried into later
// periods corrects them too, and at every step the receiver's sum per key
// is the ledger's Σ net.
func TestEventsBillNet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	oct, jan := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	after := jan.Add(24 * time.Hour)
	at := func(m time.Month) time.Time { return time.Date(2026, m, 10, 12, 0, 0, 0, time.UTC) }
	rc, s, name := httpSink(t)
	p := e.publisher(t, name, s)

	type period struct {
		key string
		m   time.Month
	}
	steps := []struct {
		name                         string
		write                        func()
		sent, corrections, unchanged int
		billed                       map[period]int64 // per period, what the receiver sums
		deltas                       map[period]int64 // the deltas of this step's events
	}{
		{"first run: a negative November carried to December", func() {
			e.writeNet(t, "k", "p1", at(10), 10, 0, 0)
			e.writeNet(t, "k", "p1", at(11), 2, 5, 0)
			e.writeNet(t, "k", "p1", at(12), 5, 0, 0)
			e.writeNet(t, "k_charged", "p1", at(11), 3, 1, 4)
		}, 4, 0, 0,
			map[period]int64{{"k", 10}: 10, {"k", 11}: 0, {"k", 12}: 2, {"k_charged", 11}: 6},
			map[period]int64{{"k", 10}: 10, {"k", 11}: 0, {"k", 12}: 2, {"k_charged", 11}: 6}},
		{"rerun", func() {}, 0, 0, 4,
			map[period]int64{{"k", 10}: 10, {"k", 11}: 0, {"k", 12}: 2, {"k_charged", 11}: 6}, nil},
		{"a late refund to October", func() { e.writeNet(t, "k", "p1~late1", at(10), 0, 4, 0) }, 0, 1, 3,
			map[period]int64{{"k", 10}: 6, {"k", 11}: 0, {"k", 12}: 2, {"k_charged", 11}: 6},
			map[period]int64{{"k", 10}: -4}},
		{"a late refund to November moves December's credit", func() { e.writeNet(t, "k", "p2", at(11), 0, 2, 0) }, 0, 2, 2,
			map[period]int64{{"k", 10}: 6, {"k", 11}: 0, {"k", 12}: 0, {"k_charged", 11}: 6},
			map[period]int64{{"k", 11}: 0, {"k", 12}: -2}},
		{"rerun after the corrections", func() {}, 0, 0, 4,
			map[period]int64{{"k", 10}: 6, {"k", 11}: 0, {"k", 12}: 0, {"k_charged", 11}: 6}, nil},
	}
	seen := map[string]bool{}
	for _, step := range steps {
		step.write()
		before, _ := rc.counts()
		st, err := p.Run(ctx, oct, jan, after)
		if err != nil || st.Sent != step.sent || st.Corrections != step.corrections || st.Unchanged != step.unchanged ||
			st.Resent != 0 || st.Difference != 0 {
			t.Fatalf("%s: %+v, %v; want %d sent, %d corrections, %d unchanged", step.name, st, err, step.sent, step.corrections,
				step.unchanged)
		}
		if d, _ := rc.counts(); d-before != len(step.deltas) {
			t.Fatalf("%s: %d deliveries, want %d", step.name, d-before, len(step.deltas))
		}
		rc.mu.Lock()
		sums, perKey, stepDeltas := map[period]int64{}, map[string]int64{}, map[period]int64{}
		for id, d := range rc.events {
			pk := period{d.Key, d.PeriodStart.Month()}
			sums[pk] += d.BilledDelta
			perKey[d.Key] += d.BilledDelta
			if !seen[id] {
				seen[id] = true
				stepDeltas[pk] = d.BilledDelta
			}
			if d.Billed < 0 || d.BilledDelta != d.Billed-d.PreviousBilled || d.Net != d.Allowed+d.Charged-d.Refunded ||
				d.Billed-d.CarriedOut != d.Net-d.CarriedIn {
				t.Errorf("%s: event %s inconsistent: %+v", step.name, id, d)
			}
		}
		rc.mu.Unlock()
		for pk, want := range step.billed {
			if sums[pk] != want || sums[pk] < 0 {
				t.Fatalf("%s: the receiver sums %d for %v, want %d (all: %v)", step.name, sums[pk], pk, want, sums)
			}
		}
		if len(stepDeltas) != len(step.deltas) {
			t.Fatalf("%s: new events %v, want %v", step.name, stepDeltas, step.deltas)
		}
		for pk, want := range step.deltas {
			if got, ok := stepDeltas[pk]; !ok || got != want {
				t.Fatalf("%s: new events %v, want %v", step.name, stepDeltas, step.deltas)
			}
		}
		net, billed := e.ledgerNet(t, export.Month, oct, jan, after)
		for key, n := range net {
			if perKey[key] != n || billed[key] != n {
				t.Fatalf("%s: %s: receiver sums %d, ledger Σ billed %d, Σ net %d", step.name, key, perKey[key], billed[key], n)
			}
		}
	}
	// The last correction of December names the event it replaces.
	rc.mu.Lock()
	fix := rc.events[sink.EventID("k", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), export.Month, 1)]
	rc.mu.Unlock()
	if fix.Revision != 1 || fix.Replaces != sink.EventID("k", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), export.Month, 0) ||
		fix.PreviousBilled != 2 || fix.Billed != 0 || fix.CarriedIn != 5 || fix.CarriedOut != 0 || fix.Net != 5 {
		t.Fatalf("December's correction: %+v", fix)
	}
}

// Periods recorded before net billing (billing_sink_events.billed the gross
// allowed cost, data without the billing figures) are corrected against what was
// sent: unchanged when nothing was refunded or charged, else one
// correction carrying billed − the gross spent sent.
func TestEventsSentBeforeNetBilling(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 7, 9, 0, 0, 0, time.UTC)
	e.writeNet(t, "k_plain", "p1", at, 10, 0, 0)
	e.writeNet(t, "k_refunded", "p1", at, 10, 3, 0)
	rc, s, name := httpSink(t)
	for _, key := range []string{"k_plain", "k_refunded"} {
		old, err := json.Marshal(map[string]any{"key": key, "period_start": nov, "period_end": dec, "granularity": "month",
			"spent": 10, "rejected": 0, "degraded": 0, "windows": 1, "revision": 0, "previous_spent": 0, "spent_delta": 10})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO billing_sink_events
    (sink, key, period_start, granularity, period_end, revision, event_id, billed, rejected, degraded, acked_billed, data, status, sent_at)
VALUES ($1, $2, $3, 'month', $4, 0, $5, 10, 0, 0, 10, $6, 'sent', now())`,
			name, key, nov, dec, sink.EventID(key, nov, export.Month, 0), old); err != nil {
			t.Fatal(err)
		}
	}
	p := e.publisher(t, name, s)
	for i, want := range []int{1, 0} {
		st, err := p.Run(ctx, nov, dec, now)
		if err != nil || st.Corrections != want || st.Unchanged != 2-want || st.Sent != 0 || st.Difference != 0 {
			t.Fatalf("run %d: %+v, %v; want %d correction", i, st, err, want)
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	fix, ok := rc.events[sink.EventID("k_refunded", nov, export.Month, 1)]
	if len(rc.events) != 1 || !ok || fix.PreviousBilled != 10 || fix.Billed != 7 || fix.BilledDelta != -3 ||
		fix.Refunded != 3 || fix.Allowed != 10 || fix.Net != 7 {
		t.Fatalf("events %v", rc.events)
	}
}

// Stripe meter events carry the billed figure: a period billed 0 sends no
// request, the credit of a negative day is deducted from the next, a late
// refund sends one negative delta, a rerun sends nothing, and Stripe's sum
// per customer is the ledger's Σ net.
func TestStripeBillsNet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	mock := startStripeMock(t)
	rec := &recorder{}
	client := sink.NewStripeClient(testSecret, mock.URL(), &http.Client{Transport: rec, Timeout: 10 * time.Second})
	day := func(d int) time.Time { return time.Date(2026, 12, d, 0, 0, 0, 0, time.UTC) }
	from, to, at := day(1), day(4), day(5)
	sync := func() (sink.StripeStats, error) {
		return sink.SyncStripe(ctx, e.pool, e.ex, client.V1BillingMeterEvents,
			sink.StripeConfig{Meter: testMeter, Granularity: export.Day, Metrics: e.m}, from, to, at)
	}
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_n", "cus_N1"); err != nil {
		t.Fatal(err)
	}
	e.writeNet(t, "acct_n", "p1", day(1).Add(time.Hour), 10, 0, 0)
	e.writeNet(t, "acct_n", "p1", day(2).Add(time.Hour), 2, 5, 0)
	e.writeNet(t, "acct_n", "p1", day(3).Add(time.Hour), 5, 0, 1)

	var stripeSum int64
	steps := []struct {
		name              string
		write             func()
		sent, corrections int
		values            map[string]string // identifier → value
	}{
		{"first run", func() {}, 3, 0, map[string]string{
			stripeID("acct_n", day(1), export.Day, 0, "cus_N1", 10, day(2).Add(-time.Second)): "10",
			stripeID("acct_n", day(3), export.Day, 0, "cus_N1", 3, day(4).Add(-time.Second)):  "3"}},
		{"rerun", func() {}, 0, 0, nil},
		{"a late refund", func() { e.writeNet(t, "acct_n", "p1~late1", day(1).Add(time.Hour), 0, 4, 0) }, 0, 1,
			map[string]string{stripeID("acct_n", day(1), export.Day, 1, "cus_N1", -4, day(2).Add(-time.Second)): "-4"}},
		{"rerun after the correction", func() {}, 0, 0, nil},
	}
	n := 0
	for _, step := range steps {
		step.write()
		st, err := sync()
		if err != nil || st.Sent != step.sent || st.Corrections != step.corrections || st.Difference != 0 {
			t.Fatalf("%s: %+v, %v", step.name, st, err)
		}
		var reqs []stripeRequest
		reqs, n = rec.accepted(n)
		if len(reqs) != len(step.values) {
			t.Fatalf("%s: %d meter events, want %d: %+v", step.name, len(reqs), len(step.values), reqs)
		}
		for _, r := range reqs {
			id := r.form.Get("identifier")
			want, ok := step.values[id]
			if !ok || r.form.Get("payload[value]") != want || r.form.Get("payload[stripe_customer_id]") != "cus_N1" {
				t.Fatalf("%s: meter event %v, want one of %v", step.name, r.form, step.values)
			}
			v, _ := strconv.ParseInt(want, 10, 64)
			stripeSum += v
		}
		net, billed := e.ledgerNet(t, export.Day, from, to, at)
		if stripeSum != net["acct_n"] || billed["acct_n"] != net["acct_n"] {
			t.Fatalf("%s: Stripe sums %d, ledger Σ billed %d, Σ net %d", step.name, stripeSum, billed["acct_n"], net["acct_n"])
		}
	}
}
