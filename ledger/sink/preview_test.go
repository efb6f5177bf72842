package sink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger/sink"
)

// sinkTablesDigest is a checksum of every sink table's rows.
func sinkTablesDigest(t *testing.T, e *env) string {
	t.Helper()
	var digest string
	err := e.pool.QueryRow(context.Background(), `SELECT concat_ws(',',
    (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM billing_sink_events t),
    (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM billing_sinks t),
    (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM billing_sink_revisits t),
    (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM billing_sink_audit t))`).Scan(&digest)
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

// A preview lists what the next run sends, per customer: the event
// Stripe refused (resent as recorded), a correction and a new key's first
// event, with the values and timestamps the run then sends to the fake
// Stripe. It writes nothing, sends nothing, and runs while another run
// holds the sink's lock.
func TestPreviewIsTheNextRun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	for _, k := range [][2]string{{"acct_a", "cus_A"}, {"acct_b", "cus_B"}, {"acct_c", "cus_A"}} {
		if err := sink.SetStripeCustomer(ctx, e.pool, k[0], k[1]); err != nil {
			t.Fatal(err)
		}
	}
	e.write(t, "acct_a", "p1", at, 100, true)
	e.write(t, "acct_b", "p1", at, 50, true)
	clk := clock.NewManual(time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC))
	fake := startFakeStripeAt(t, clk, time.Hour)
	cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk}
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); err != nil {
		t.Fatal(err)
	}
	e.write(t, "acct_b", "p2", at, 7, true) // a late report: a correction
	e.write(t, "acct_c", "p1", at, 30, true)
	fake.tooMany.Store(true)
	clk.Advance(10 * time.Minute)
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); !errors.Is(err, sink.ErrSinkRefused) {
		t.Fatalf("run against a 429: %v, want refused", err)
	}
	fake.tooMany.Store(false)
	clk.Advance(10 * time.Minute)

	// Another run holds the sink's lock: a preview only reads.
	lock, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() { // before the pool closes, which waits for every connection
		if !released {
			lock.Release()
		}
	})
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, "quota-sink:"+sink.StripeSinkName(testMeter)); err != nil {
		t.Fatal(err)
	}
	before := sinkTablesDigest(t, e)
	_, requestsBefore := fake.billedBy("cus_A")
	planned, st, err := sink.PreviewStripe(ctx, e.pool, e.ex, cfg, nov, dec, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if after := sinkTablesDigest(t, e); after != before {
		t.Errorf("the sink tables changed under a preview:\n%s\n%s", before, after)
	}
	if _, requests := fake.billedBy("cus_A"); requests != requestsBefore {
		t.Errorf("a preview sent %d requests to Stripe", requests-requestsBefore)
	}
	kinds := map[string]int{}
	for _, p := range planned {
		kinds[p.Kind]++
	}
	if kinds["resend"] != 1 || kinds["correction"]+kinds["first"] != 1 || len(planned) != 2 || st.Resent != 1 {
		t.Fatalf("planned %+v (stats %+v); want the refused event resent and one other", planned, st)
	}
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	lock.Release()
	released = true

	fake.mu.Lock()
	sentBefore := len(fake.history)
	fake.mu.Unlock()
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	sent := append([]fakeMeterEvent(nil), fake.history[sentBefore:]...)
	fake.mu.Unlock()
	if len(sent) != len(planned) {
		t.Fatalf("the run sent %+v, the preview planned %+v", sent, planned)
	}
	for i, p := range planned {
		got := fakeMeterEvent{customer: p.Customer, value: p.Value, timestamp: p.Timestamp.Unix(),
			arrived: sent[i].arrived} // when the fake took it: not the preview's to know
		if got != sent[i] {
			t.Errorf("event %d: planned %+v, sent %+v", i, got, sent[i])
		}
	}
	perCustomer := map[string]int64{}
	for _, p := range planned {
		perCustomer[p.Customer] += p.Value
	}
	if perCustomer["cus_A"] != 30 || perCustomer["cus_B"] != 7 {
		t.Errorf("planned per customer %v, want cus_A 30 (acct_c), cus_B 7 (acct_b's correction)", perCustomer)
	}
}
