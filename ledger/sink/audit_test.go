package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger/sink"
)

// A period's audit trail keeps every attempt and answer in order: sent
// and refused (429), resent and acknowledged, then corrected after a late
// report. billing_sink_events holds only the last of them; the trail is
// append-only.
func TestAuditTrailKeepsEveryAttempt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 100, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Date(2026, 12, 1, 0, 20, 0, 0, time.UTC))
	fake := startFakeStripeAt(t, clk, time.Hour)
	cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk}
	run := func(wantErr error) {
		t.Helper()
		if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); !errors.Is(err, wantErr) {
			t.Fatalf("run at %v: %v, want %v", clk.Now(), err, wantErr)
		}
	}
	fake.tooMany.Store(true)
	run(sink.ErrSinkRefused)
	fake.tooMany.Store(false)
	clk.Advance(10 * time.Minute)
	run(nil)
	e.write(t, "acct_a", "p2", at, 10, true) // a late report
	clk.Advance(10 * time.Minute)
	run(nil)

	trail, err := sink.Audit(ctx, e.pool, sink.AuditQuery{Key: "acct_a", From: nov, To: dec})
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		action, status string
		revision       int
		code           int
		billed, acked  int64
		value          int64 // the frame's value; -1: no frame
	}
	want := []step{
		{"request", "pending", 0, 0, 100, 0, 100},
		{"answer", "failed", 0, 429, 100, 0, -1},
		{"resend", "pending", 0, 0, 100, 0, 100},
		{"answer", "sent", 0, 0, 100, 100, -1},
		{"request", "pending", 1, 0, 110, 100, 10},
		{"answer", "sent", 1, 0, 110, 110, -1},
	}
	if len(trail) != len(want) {
		t.Fatalf("trail has %d rows, want %d: %+v", len(trail), len(want), trail)
	}
	for i, w := range want {
		g := trail[i]
		value := int64(-1)
		if g.Frame != nil {
			var f struct{ Value int64 }
			if err := json.Unmarshal(g.Frame, &f); err != nil {
				t.Fatal(err)
			}
			value = f.Value
		}
		if g.Action != w.action || g.Status != w.status || g.Revision != w.revision || g.StatusCode != w.code ||
			g.Billed != w.billed || g.Acked != w.acked || value != w.value {
			t.Errorf("row %d: %s %s rev %d code %d billed %d acked %d value %d; want %+v", i, g.Action, g.Status, g.Revision,
				g.StatusCode, g.Billed, g.Acked, value, w)
		}
		if i > 0 && (g.ID <= trail[i-1].ID || g.At.Before(trail[i-1].At)) {
			t.Errorf("row %d out of order", i)
		}
	}
	if a := trail[1].Answer; len(a) == 0 || len(a) > 2000 {
		t.Errorf("the 429's answer is %q, want Stripe's error, at most 2000 characters", a)
	}
	if trail[0].Data == nil {
		t.Error("the request row lacks the event's data")
	}
	if billed, _ := fake.billedBy("cus_A"); billed != 110 {
		t.Errorf("Stripe billed %d, want 110", billed)
	}
	for _, q := range []string{`UPDATE billing_sink_audit SET billed = 0`, `DELETE FROM billing_sink_audit`, `TRUNCATE billing_sink_audit`} {
		if _, err := e.pool.Exec(ctx, q); err == nil {
			t.Errorf("%s: accepted, want refused (append-only)", q)
		}
	}
}
