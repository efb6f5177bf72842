package sink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger/sink"
)

// Finalization is judged at each send (issue 36, item 4), against a fake
// Stripe that finalizes November's invoice at 01:00 on December 1:
//   - a 429 at 00:20 stored nothing, so the resend at 01:20 is stamped
//     01:20 and lands on the open invoice: 100 of 100 invoiced (resent
//     with November's timestamp it was stored on the finalized invoice:
//     0 of 100, and recorded delivered);
//   - an answer lost at 00:20 may have stored it (it did): at 01:20,
//     without summaries, it is held for a person, not re-stamped (that
//     would bill it twice), and invoiced once; with them, the summary of
//     the minute shows its 100, and it is recorded delivered;
//   - a 500 at 00:20 may have stored it (it did not): with summaries the
//     minute shows nothing, and it is re-stamped at 01:20;
//   - a pass started at 00:10 whose first event takes Stripe 90 minutes
//     stamps the next one at 01:40, on the open invoice, not by the
//     pass's start.
func TestFinalizationJudgedAtSend(t *testing.T) {
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name          string
		fail          func(f *fakeStripe, on bool)
		summaries     bool
		restamped     int
		settled       int
		held          int
		wantInvoiced  int64
		wantTimestamp time.Time
	}{
		{"429 then resent", func(f *fakeStripe, on bool) { f.tooMany.Store(on) }, false, 1, 0, 0, 100,
			time.Date(2026, 12, 1, 1, 20, 0, 0, time.UTC)},
		{"answer lost then finalized", func(f *fakeStripe, on bool) { f.dropAnswers.Store(on) }, false, 0, 0, 1, 100,
			time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)},
		{"answer lost, settled by summaries", func(f *fakeStripe, on bool) { f.dropAnswers.Store(on) }, true, 0, 1, 0, 100,
			time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)},
		{"500, settled by summaries", func(f *fakeStripe, on bool) { f.down.Store(on) }, true, 1, 1, 0, 100,
			time.Date(2026, 12, 1, 1, 20, 0, 0, time.UTC)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			e.write(t, "acct_a", "p1", at, 100, true)
			if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
				t.Fatal(err)
			}
			clk := clock.NewManual(time.Date(2026, 12, 1, 0, 20, 0, 0, time.UTC))
			fake := startFakeStripeAt(t, clk, time.Hour)
			cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk}
			if tt.summaries {
				cfg.Summaries = fake.summaries()
			}
			tt.fail(fake, true)
			if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); !errors.Is(err, sink.ErrSinkRefused) {
				t.Fatalf("run at 00:20: %v, want refused", err)
			}
			tt.fail(fake, false)
			clk.Set(time.Date(2026, 12, 1, 1, 20, 0, 0, time.UTC))
			st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now())
			if err != nil || st.Restamped != tt.restamped || st.Settled != tt.settled || len(st.Held) != tt.held {
				t.Fatalf("run at 01:20: %+v, %v; want %d re-stamped, %d settled, %d held", st, err, tt.restamped, tt.settled, tt.held)
			}
			if tt.held == 0 && (st.Unsent != 0 || st.KeysDiffering != 0) {
				t.Errorf("run at 01:20: %d unsent, %d keys differing; want none", st.Unsent, st.KeysDiffering)
			}
			if got := fake.invoicedTo("cus_A"); got != tt.wantInvoiced {
				t.Errorf("invoiced %d, want %d", got, tt.wantInvoiced)
			}
			if billed, _ := fake.billedBy("cus_A"); billed != 100 {
				t.Errorf("Stripe holds %d for cus_A, want 100 once", billed)
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			for _, ev := range fake.stored {
				if !time.Unix(ev.timestamp, 0).Equal(tt.wantTimestamp) {
					t.Errorf("stored with timestamp %v, want %v", time.Unix(ev.timestamp, 0).UTC(), tt.wantTimestamp)
				}
			}
		})
	}

	t.Run("a pass longer than the grace", func(t *testing.T) {
		e := newEnv(t)
		ctx := context.Background()
		for _, k := range [][2]string{{"acct_a", "cus_A"}, {"acct_b", "cus_B"}} {
			e.write(t, k[0], "p1", at, 10, true)
			if err := sink.SetStripeCustomer(ctx, e.pool, k[0], k[1]); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Date(2026, 12, 1, 0, 10, 0, 0, time.UTC)
		clk := clock.NewManual(start)
		fake := startFakeStripeAt(t, clk, time.Hour)
		slow := true
		fake.arrived = func() { // the handler's goroutine; the run waits for its answer
			if slow {
				slow = false
				clk.Advance(90 * time.Minute)
			}
		}
		cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk}
		if st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, start); err != nil || st.Sent != 2 {
			t.Fatalf("pass: %+v, %v", st, err)
		}
		for c, want := range map[string]int64{"cus_A": 10, "cus_B": 10} {
			if got := fake.invoicedTo(c); got != want {
				t.Errorf("invoiced %s %d, want %d", c, got, want)
			}
		}
	})
}

// Stripe's meter event summaries lag what it stored. An attempt at 00:55
// on December 1 may have stored November's event; at 01:05 its invoice is
// finalized, and the summaries, 30 minutes behind, do not show it yet.
// Settled then, an event Stripe holds would be judged missing, re-stamped
// and billed twice. Younger than StripeConfig.SettleAfter (1h) it is
// neither settled, re-sent nor held; at 02:00 the summaries decide: held,
// it is recorded delivered; missing, it is re-stamped and sent once.
func TestSettlementWaitsForSummaries(t *testing.T) {
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name      string
		fail      func(f *fakeStripe, on bool)
		settled   int
		restamped int
	}{
		{"stored, answer lost", func(f *fakeStripe, on bool) { f.dropAnswers.Store(on) }, 1, 0},
		{"not stored, 500", func(f *fakeStripe, on bool) { f.down.Store(on) }, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			e.write(t, "acct_a", "p1", at, 100, true)
			if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
				t.Fatal(err)
			}
			clk := clock.NewManual(time.Date(2026, 12, 1, 0, 55, 0, 0, time.UTC))
			fake := startFakeStripeAt(t, clk, time.Hour)
			fake.summaryLag = 30 * time.Minute
			cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk, Summaries: fake.summaries()}
			tt.fail(fake, true)
			if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); !errors.Is(err, sink.ErrSinkRefused) {
				t.Fatalf("pass at 00:55: %v, want refused", err)
			}
			tt.fail(fake, false)
			stored, _ := fake.billedBy("cus_A")

			clk.Set(time.Date(2026, 12, 1, 1, 5, 0, 0, time.UTC))
			st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now())
			if err != nil || st.Unsettled != 1 || st.Settled+st.Resent+st.Restamped != 0 || len(st.Held) != 0 || st.Unsent != 1 {
				t.Fatalf("pass at 01:05: %+v, %v; want the event left unsettled, unsent, not held", st, err)
			}
			if b, _ := fake.billedBy("cus_A"); b != stored {
				t.Fatalf("pass at 01:05 changed what Stripe bills: %d, was %d", b, stored)
			}

			clk.Set(time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC))
			st, err = sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now())
			if err != nil || st.Settled != tt.settled || st.Restamped != tt.restamped || st.Unsettled != 0 || st.Unsent != 0 {
				t.Fatalf("pass at 02:00: %+v, %v; want %d settled, %d re-stamped, nothing unsent", st, err, tt.settled, tt.restamped)
			}
			if b, _ := fake.billedBy("cus_A"); b != 100 {
				t.Errorf("Stripe bills cus_A %d, want 100 once", b)
			}
			if got := fake.invoicedTo("cus_A"); got != 100 {
				t.Errorf("invoiced %d, want 100", got)
			}
		})
	}
}
