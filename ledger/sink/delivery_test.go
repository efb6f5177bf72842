package sink_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// Stripe stores an event but its answer is lost: the next run re-sends
// the same identifier with the same payload, Stripe answers "already
// exists with identifier", and that counts as delivered: the run goes on
// to the next key, and Stripe bills each key once (issue 27, scenario 2).
func TestStripeLostAnswerIsDeliveredOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fake := startFakeStripe(t)
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 10, true)
	e.write(t, "acct_b", "p1", at, 5, true)
	for key, cus := range map[string]string{"acct_a": "cus_A", "acct_b": "cus_B"} {
		if err := sink.SetStripeCustomer(ctx, e.pool, key, cus); err != nil {
			t.Fatal(err)
		}
	}
	cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m}
	sync := func(at time.Time) (sink.StripeStats, error) {
		return sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, at)
	}
	fake.dropAnswers.Store(true)
	if st, err := sync(now); !errors.Is(err, sink.ErrSinkRefused) || st.Sent != 0 {
		t.Fatalf("run with answers lost: %+v, %v", st, err)
	}
	if b, _ := fake.billedBy("cus_A"); b != 10 {
		t.Fatalf("Stripe stored %d for cus_A, want 10 (the event whose answer was lost)", b)
	}
	fake.dropAnswers.Store(false)
	st, err := sync(now.Add(time.Hour))
	if err != nil || st.Resent != 1 || st.Sent != 1 {
		t.Fatalf("run after the lost answer: %+v, %v; want acct_a acknowledged by its duplicate, acct_b sent", st, err)
	}
	// A day later Stripe has forgotten the identifiers: nothing is sent
	// again, since both events are acknowledged.
	fake.forget()
	if st, err := sync(now.Add(26 * time.Hour)); err != nil || st.Unchanged != 2 || st.Sent+st.Resent+st.Corrections != 0 {
		t.Fatalf("run a day later: %+v, %v", st, err)
	}
	a, _ := fake.billedBy("cus_A")
	b, _ := fake.billedBy("cus_B")
	if a != 10 || b != 5 || st.KeysDiffering != 0 {
		t.Fatalf("Stripe billed cus_A %d cus_B %d (want 10, 5); %d keys differ", a, b, st.KeysDiffering)
	}
}

// An event still unacknowledged more than StripeResendWindow after its
// first attempt is held, not re-sent (Stripe may have stored it and
// forgotten its identifier: a resend would bill twice): listed in
// Stats.Held, counted in quota_sink_held_events, and the other keys still
// go.
func TestStripeEventHeldPastDedupeWindow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fake := startFakeStripe(t)
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 10, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	sync := func(at time.Time) (sink.StripeStats, error) {
		return sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), sink.StripeConfig{Meter: testMeter, Metrics: e.m}, nov, dec, at)
	}
	fake.dropAnswers.Store(true)
	if _, err := sync(now); !errors.Is(err, sink.ErrSinkRefused) {
		t.Fatalf("run with answers lost: %v", err)
	}
	fake.dropAnswers.Store(false)
	fake.forget()
	e.write(t, "acct_b", "p1", at, 5, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_b", "cus_B"); err != nil {
		t.Fatal(err)
	}
	later := now.Add(sink.StripeResendWindow + time.Minute)
	for range 2 { // held stays held
		st, err := sync(later)
		if err != nil || len(st.Held) != 1 || st.Held[0].Key != "acct_a" || st.Held[0].Billed != 10 || st.Held[0].Acked != 0 ||
			!st.Held[0].FirstAttempt.Equal(now) || st.Resent != 0 {
			t.Fatalf("run past the window: %+v, %v", st, err)
		}
	}
	if a, _ := fake.billedBy("cus_A"); a != 10 {
		t.Fatalf("Stripe billed cus_A %d, want 10: the held event was sent again", a)
	}
	if b, _ := fake.billedBy("cus_B"); b != 5 {
		t.Fatalf("Stripe billed cus_B %d, want 5: the held event blocked another key", b)
	}
	if g := testutil.ToFloat64(e.m.Held(sink.StripeSinkName(testMeter))); g != 1 {
		t.Fatalf("quota_sink_held_events = %v, want 1", g)
	}
	var status, eventID string
	if err := e.pool.QueryRow(ctx, `SELECT status, event_id FROM billing_sink_events WHERE key = 'acct_a'`).Scan(&status, &eventID); err != nil ||
		status != "held" {
		t.Fatalf("acct_a's record: %q, %v", status, err)
	}
	// A person finds the event in Stripe's meter event summaries and
	// settles it as delivered: nothing is sent, nothing differs.
	name := sink.StripeSinkName(testMeter)
	if err := sink.SettleHeld(ctx, e.pool, name, "qu-nosuch", true, now); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("settling an unknown event: %v", err)
	}
	if err := sink.SettleHeld(ctx, e.pool, name, eventID, true, now); err != nil {
		t.Fatal(err)
	}
	st, err := sync(later.Add(time.Hour))
	if a, _ := fake.billedBy("cus_A"); err != nil || len(st.Held) != 0 || st.KeysDiffering != 0 || st.Unchanged != 2 || a != 10 {
		t.Fatalf("run after settling: %+v, %v; cus_A billed %d", st, err, a)
	}
}

// failingBookkeeping makes every write to billing_sink_events fail while
// its flag row exists (a trigger), to lose the record of an event the
// sink acknowledged.
func failingBookkeeping(t *testing.T, e *env) (fail, heal func()) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE fail_sink_writes (on_ bool)`,
		`CREATE FUNCTION fail_sink_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM fail_sink_writes) THEN RAISE EXCEPTION 'bookkeeping down'; END IF;
    RETURN NEW;
END $$`,
		`CREATE TRIGGER fail_sink_writes BEFORE INSERT OR UPDATE ON billing_sink_events
    FOR EACH ROW EXECUTE FUNCTION fail_sink_writes()`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(q string) func() {
		return func() {
			if _, err := e.pool.Exec(ctx, q); err != nil {
				t.Error(err)
			}
		}
	}
	return exec(`INSERT INTO fail_sink_writes VALUES (true)`), exec(`DELETE FROM fail_sink_writes`)
}

// afterSend runs then once, after the first event its Sender delivered.
type afterSend struct {
	sink.Sender
	then func()
}

func (a *afterSend) Send(ctx context.Context, ev cloudevents.Event) error {
	err := a.Sender.Send(ctx, ev)
	if err == nil && a.then != nil {
		a.then()
		a.then = nil
	}
	return err
}

// An event is delivered and its record then fails; a late report changes
// the period before the next run. The next run re-sends the recorded
// event unchanged (the receiver drops it as a duplicate) and then a
// correction: the receiver, which keeps the first payload of an id, bills
// the ledger's figure (issue 27, scenario 3).
func TestLostRecordNeverReusesAnID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 10, true)
	fail, heal := failingBookkeeping(t, e)
	rc, s, name := httpSink(t)
	p := e.publisher(t, name, &afterSend{Sender: s, then: fail})
	if _, err := p.Run(ctx, nov, dec, now); err == nil || !strings.Contains(err.Error(), "bookkeeping down") {
		t.Fatalf("run whose record fails: %v", err)
	}
	heal()
	e.write(t, "acct_a", "p1~late1", at, 4, true)
	st, err := p.Run(ctx, nov, dec, now)
	if err != nil || st.KeysDiffering != 0 {
		t.Fatalf("run after the late report: %+v, %v", st, err)
	}
	if b := rc.billed()["acct_a"]; b != 14 {
		t.Fatalf("the receiver bills acct_a %d, the ledger 14 (stats %+v)", b, st)
	}
	if st.Resent != 1 || st.Corrections != 1 {
		t.Fatalf("run after the late report: %+v; want the recorded event re-sent, then one correction", st)
	}
}

// An event refused before migration 010 (status failed, no frame) is
// re-sent with the identifier and timestamp the older code gave it, so
// Stripe, which stored it, drops the resend as a duplicate.
func TestStripeFailedEventFromBeforeFramesResentAsBefore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fake := startFakeStripe(t)
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 10, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	id := sink.EventID("acct_a", nov, export.Month, 0)
	h := sha256.Sum256([]byte(testMeter + "\x00" + id))
	legacy := "qu-" + hex.EncodeToString(h[:16])
	data := `{"key":"acct_a","period_start":"2026-11-01T00:00:00Z","period_end":"2026-12-01T00:00:00Z","granularity":"month","billed":10,"spent":10,"revision":0}`
	if _, err := e.pool.Exec(ctx, `INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision,
    event_id, billed, rejected, degraded, data, status) VALUES ($1, 'acct_a', $2, 'month', $3, 0, $4, 10, 0, 0, $5, 'failed')`,
		sink.StripeSinkName(testMeter), nov, dec, id, data); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock() // Stripe stored it; the answer was lost
	fake.stored[legacy] = fakeMeterEvent{customer: "cus_A", value: 10, timestamp: dec.Unix() - 1}
	fake.billed["cus_A"] = 10
	fake.mu.Unlock()
	st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), sink.StripeConfig{Meter: testMeter}, nov, dec, now)
	if b, _ := fake.billedBy("cus_A"); err != nil || st.Resent != 1 || b != 10 {
		t.Fatalf("resend of a pre-010 event: Stripe billed %d, want 10 (%+v, %v)", b, st, err)
	}
}
