package sink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// blockFirst blocks its first Send until release is closed, telling
// entered when it starts.
type blockFirst struct {
	sink.Sender
	entered, release chan struct{}
	calls            int // touched only by the one run that sends
}

func (b *blockFirst) Send(ctx context.Context, ev cloudevents.Event) error {
	b.calls++
	if b.calls == 1 {
		close(b.entered)
		<-b.release
	}
	return b.Sender.Send(ctx, ev)
}

// Two runs of one sink cannot run at once: while one is sending, a
// second fails at once with ErrRunning naming the sink; once the first
// is done, the next run goes (issue 27, scenario 8).
func TestConcurrentRunsOfOneSink(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.write(t, "acct_a", "p1", time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC), 10, true)
	rc, s, name := httpSink(t)
	b := &blockFirst{Sender: s, entered: make(chan struct{}), release: make(chan struct{})}
	p := e.publisher(t, name, b)
	first := make(chan error, 1) // the first run's result, read once
	go func() {
		_, err := p.Run(ctx, nov, dec, now)
		first <- err
	}()
	select {
	case <-b.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first run never sent")
	}
	other := e.publisher(t, name, s)
	start := time.Now()
	_, err := other.Run(ctx, nov, dec, now)
	if !errors.Is(err, sink.ErrRunning) || !strings.Contains(err.Error(), name) || time.Since(start) > 5*time.Second {
		t.Fatalf("second run while the first sends: %v after %v; want ErrRunning naming %s at once", err, time.Since(start), name)
	}
	close(b.release)
	if err := <-first; err != nil {
		t.Fatalf("first run: %v", err)
	}
	if st, err := other.Run(ctx, nov, dec, now); err != nil || st.Unchanged != 1 {
		t.Fatalf("run after the first ended: %+v, %v", st, err)
	}
	if d, distinct := rc.counts(); d != 1 || distinct != 1 {
		t.Fatalf("%d deliveries of %d events, want 1 of 1", d, distinct)
	}
}

// A run for --month also corrects an earlier month that changed: a late
// report to October reaches the sink from a November run (issue 27,
// scenario 8).
func TestEarlierPeriodCorrected(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	at := time.Date(2026, 10, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 10, true)
	rc, s, name := httpSink(t)
	p := e.publisher(t, name, s)
	if st, err := p.Run(ctx, oct, nov, nov.Add(time.Hour)); err != nil || st.Sent != 1 {
		t.Fatalf("October's run: %+v, %v", st, err)
	}
	e.write(t, "acct_a", "p1~late1", at, 4, true)
	e.write(t, "acct_b", "p1", at, 3, true) // a key October's run never saw
	st, err := p.Run(ctx, nov, dec, now)
	if err != nil || st.Corrections != 1 || st.Sent != 1 || st.KeysDiffering != 0 {
		t.Fatalf("November's run: %+v, %v; want October's correction and its unsent key", st, err)
	}
	if b := rc.billed(); b["acct_a"] != 14 || b["acct_b"] != 3 {
		t.Fatalf("the receiver bills %v, want acct_a 14 acct_b 3", b)
	}
}

// The difference is judged key by key: a re-opened key's surplus at the
// sink and another key's unsent usage both show, where their sum is 0
// (issue 27, scenario 5).
func TestDifferencePerKey(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_reopened", "p1", at, 10, true)
	rc, s, name := httpSink(t)
	p := e.publisher(t, name, s)
	if st, err := p.Run(ctx, nov, dec, now); err != nil || st.Sent != 1 {
		t.Fatalf("first run: %+v, %v", st, err)
	}
	e.write(t, "acct_reopened", "p9", at, 3, false) // a process that has not sent its final: re-opened
	e.write(t, "acct_unsent", "p1", at, 10, true)
	rc.down.Store(true)
	st, err := p.Run(ctx, nov, dec, now)
	if !errors.Is(err, sink.ErrSinkRefused) {
		t.Fatalf("run with the sink down: %v", err)
	}
	// Summed as before, closed periods (10, unsent) less acknowledged
	// (10, the re-opened key's) said 0.
	if st.KeysDiffering != 2 || st.AbsDifference != 13 {
		t.Fatalf("run with the sink down: %d keys differ by %d in all; want 2 keys by 13 (stats %+v)",
			st.KeysDiffering, st.AbsDifference, st)
	}
	if g := testutil.ToFloat64(e.m.KeysDiffering(name)); g != 2 {
		t.Fatalf("quota_sink_keys_differing = %v, want 2", g)
	}
	ds, err := sink.KeyDifferences(ctx, e.pool, name, export.Month, export.CalendarUTC, nov, dec, now)
	if err != nil || len(ds) != 2 {
		t.Fatalf("KeyDifferences: %+v, %v", ds, err)
	}
	want := map[string]sink.KeyDifference{
		"acct_reopened": {Key: "acct_reopened", PeriodStart: nov, Ledger: 13, Acked: 10, Complete: false, Status: "sent"},
		"acct_unsent":   {Key: "acct_unsent", PeriodStart: nov, Ledger: 10, Acked: 0, Complete: true, Status: "failed"},
	}
	for _, d := range ds {
		if d != want[d.Key] {
			t.Errorf("difference %+v, want %+v", d, want[d.Key])
		}
	}
}
