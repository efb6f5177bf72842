package sink_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/ledger/sink"
)

// seedKeys writes n keys' November usage (key i spends i+1) in one batch
// and maps key i to customer cus_i; it returns Σ spent.
func seedKeys(t testing.TB, e *env, n int) int64 {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	reps := make([]ledger.Report, n)
	var total int64
	for i := range reps {
		reps[i] = ledger.Report{Key: fmt.Sprintf("acct_%04d", i), WindowStart: at, WindowEnd: at.Add(time.Minute), ProcessID: "p1",
			Region: "eu", Spent: int64(i + 1), Final: true, Seq: 1, SentAt: at}
		total += int64(i + 1)
	}
	if _, err := reconcile.NewWriter(e.pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := sink.SetStripeCustomer(ctx, e.pool, fmt.Sprintf("acct_%04d", i), fmt.Sprintf("cus_%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	return total
}

// billedOnce fails t unless Stripe bills customer i exactly i+1, for n
// customers.
func billedOnce(t testing.TB, fake *fakeStripe, n int) {
	t.Helper()
	fake.mu.Lock()
	defer fake.mu.Unlock()
	for i := range n {
		if got, want := fake.billed[fmt.Sprintf("cus_%04d", i)], int64(i+1); got != want {
			t.Errorf("Stripe billed cus_%04d %d, want %d", i, got, want)
		}
	}
}

// 250 periods go to Stripe's v2 meter event stream in 3 requests of at
// most 100 events (one v1 request each before), each billed once; a pass
// 20 minutes later, with the first session expired, opens a new one; a
// pass with nothing to send makes no request.
func TestStripeBatches(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	seedKeys(t, e, 250)
	clk := clock.NewManual(now)
	fake := startFakeStripeAt(t, clk, time.Hour)
	cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk, Stream: fake.stream()}
	st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now())
	if err != nil || st.Sent != 250 || st.Requests != 3 {
		t.Fatalf("pass: %+v, %v; want 250 sent in 3 requests", st, err)
	}
	t.Logf("requests per pass: %d for %d events", st.Requests, st.Sent)
	if got := fake.streamRequests(); !slices.Equal(got, []int{100, 100, 50}) {
		t.Errorf("stream requests carried %v events, want [100 100 50]", got)
	}
	if _, v1 := fake.billedBy("cus_0000"); v1 != 0 {
		t.Errorf("%d v1 requests, want none", v1)
	}
	billedOnce(t, fake, 250)

	clk.Advance(20 * time.Minute)
	e.write(t, "acct_0000", "p1~late1", time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC), 5, true)
	st, err = sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now())
	if err != nil || st.Corrections != 1 || st.Requests != 1 || st.Unchanged != 249 {
		t.Fatalf("pass after the session expired: %+v, %v; want one correction in one request", st, err)
	}
	fake.mu.Lock()
	sessions := len(fake.sessions)
	fake.mu.Unlock()
	if sessions != 2 {
		t.Errorf("%d meter event sessions, want 2 (the first expired after 15 minutes)", sessions)
	}
	st, err = sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now())
	if err != nil || st.Requests != 0 || st.Unchanged != 250 {
		t.Fatalf("idle pass: %+v, %v; want no request", st, err)
	}
	if b, _ := fake.billedBy("cus_0000"); b != 6 {
		t.Errorf("Stripe billed cus_0000 %d, want 6 (1 and the correction's 5)", b)
	}
}

// A stream request fails in the middle of a pass's second batch: the
// first batch is recorded delivered, the second's events failed, the
// rest never recorded. The next pass re-sends exactly the failed events,
// with their recorded identifiers, and sends the rest: Stripe, which
// dropped the identifiers it already held, bills each event once.
func TestStripeBatchFailureBillsOnce(t *testing.T) {
	for _, tt := range []struct {
		name      string
		fail      func(f *fakeStripe, on bool)
		at        int   // the request whose stored events switch the failure on
		stored    int64 // events of the failed request Stripe stored
		ambiguous bool  // the failure may have stored events
	}{
		{"500 after 30 events stored", func(f *fakeStripe, on bool) {
			if on {
				f.failMidway.Store(30)
			}
		}, 1, 30, true},
		{"answer lost", func(f *fakeStripe, on bool) { f.dropAnswers.Store(on) }, 2, 100, true},
		{"429", func(f *fakeStripe, on bool) { f.tooMany.Store(on) }, 1, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			total := seedKeys(t, e, 250)
			clk := clock.NewManual(now)
			fake := startFakeStripeAt(t, clk, time.Hour)
			cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk, Stream: fake.stream()}
			arrivals := 0
			fake.arrived = func() { // the handler's goroutine, after a request's events are stored, before its answer
				if arrivals++; arrivals == tt.at {
					tt.fail(fake, true)
				}
			}
			st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now())
			if !errors.Is(err, sink.ErrSinkRefused) || st.Sent != 100 {
				t.Fatalf("failing pass: %+v, %v; want 100 sent, then refused", st, err)
			}
			tt.fail(fake, false)
			var failed, maybe, sent, recorded int
			if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE maybe_stored),
    count(*) FILTER (WHERE status = 'sent'), count(*) FROM billing_sink_events`).Scan(&failed, &maybe, &sent, &recorded); err != nil {
				t.Fatal(err)
			}
			wantMaybe := 0
			if tt.ambiguous {
				wantMaybe = 100
			}
			if failed != 100 || sent != 100 || recorded != 200 || maybe != wantMaybe {
				t.Fatalf("after the failure: %d failed (%d maybe stored), %d sent, %d recorded; want 100 (%d), 100, 200",
					failed, maybe, sent, recorded, wantMaybe)
			}
			stored := int64(0)
			fake.mu.Lock()
			for _, b := range fake.billed {
				stored += b
			}
			nStored := len(fake.history)
			fake.mu.Unlock()
			if want := 100 + tt.stored; int64(nStored) != want {
				t.Fatalf("Stripe stored %d events, want %d (%d billed)", nStored, want, stored)
			}
			clk.Advance(10 * time.Minute)
			st, err = sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now())
			if err != nil || st.Resent != 100 || st.Sent != 50 || st.Unsent != 0 || st.KeysDiffering != 0 {
				t.Fatalf("next pass: %+v, %v; want the 100 failed re-sent and 50 sent", st, err)
			}
			t.Logf("requests per pass: %d for %d events", st.Requests, st.Resent+st.Sent)
			billedOnce(t, fake, 250)
			fake.mu.Lock()
			var all int64
			for _, b := range fake.billed {
				all += b
			}
			fake.mu.Unlock()
			if all != total {
				t.Errorf("Stripe billed %d in all, the ledger %d", all, total)
			}
		})
	}
}

// BenchmarkStripePass times one pass over 2,000 periods, each billed to
// its own customer, against the HTTP fake Stripe and Postgres: one request
// per event (v1) and in batches of 100 (the v2 stream). Each iteration
// seeds a fresh ledger (not timed) and reports the requests it made.
//
//	go test -run '^$' -bench StripePass -benchtime 3x ./ledger/sink/
func BenchmarkStripePass(b *testing.B) {
	const n = 2000
	for _, batched := range []bool{false, true} {
		name := "one-at-a-time"
		if batched {
			name = "batched"
		}
		b.Run(name, func(b *testing.B) {
			var requests int
			for b.Loop() {
				b.StopTimer()
				e := newEnv(b)
				seedKeys(b, e, n)
				// The pass's clock is the test's, not the machine's date: the
				// sink stamps events and judges their invoice by it.
				clk := clock.NewManual(now)
				fake := startFakeStripeAt(b, clk, time.Hour)
				cfg := sink.StripeConfig{Meter: testMeter, Clock: clk}
				if batched {
					cfg.Stream = fake.stream()
				}
				b.StartTimer()
				st, err := sink.SyncStripe(context.Background(), e.pool, e.ex, fake.events(), cfg, nov, dec, now)
				b.StopTimer()
				if err != nil || st.Sent != n {
					b.Fatalf("pass: %+v, %v", st, err)
				}
				billedOnce(b, fake, n)
				requests = st.Requests
				b.StartTimer()
			}
			b.ReportMetric(float64(requests), "requests/pass")
			b.ReportMetric(float64(n), "events/pass")
		})
	}
}
