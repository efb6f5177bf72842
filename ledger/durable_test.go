package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/limit"
)

// RecordDurable returns once the window's cumulative report, the delta
// included, is in the stream: no Flush, no loop, and the Reporter is then
// abandoned without Close (a process killed right after the answer).
// With NATS away it returns once the report is in the spool, which a
// Reporter opened on the same directory after the restart sends.
func TestRecordDurableBeforeReturning(t *testing.T) {
	srv := testserver.StartNATS(t)
	js := connect(t, srv.URL)
	clk := clock.NewManual(t0.Add(time.Second))
	dir := t.TempDir()
	spoolIn := func(c *ledger.Config) { c.SpoolDir = dir }
	r, m := newReporter(t, js, clk, spoolIn)
	ctx := context.Background()

	r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 5, Leased: 5}})
	if err := r.RecordDurable(ctx, []limit.Usage{{Key: "a", WindowStart: t0, Refunded: 2}}); err != nil {
		t.Fatal(err)
	}
	if got := reportOf(t, js, "a"); got.Spent != 5 || got.Refunded != 2 || got.Final {
		t.Fatalf("report in the stream after RecordDurable: %+v, want spent 5, refunded 2", got)
	}
	if n := histCount(m.DurableSeconds); n != 1 {
		t.Fatalf("durable_record_seconds count %d, want 1", n)
	}
	// Nothing new: no message.
	_, before := latest(t, js)
	if err := r.RecordDurable(ctx, []limit.Usage{{Key: "a", WindowStart: t0}}); err != nil {
		t.Fatal(err)
	}
	if _, after := latest(t, js); after != before {
		t.Fatalf("a zero RecordDurable published: %d reports, then %d", before, after)
	}

	// NATS away: the charge goes to the spool, synced, before the call returns.
	srv.Stop()
	testserver.WaitFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if js.Conn().IsConnected() {
			return errors.New("still connected")
		}
		return nil
	})
	if err := r.RecordDurable(ctx, []limit.Usage{{Key: "a", WindowStart: t0, Charged: 7}}); err != nil {
		t.Fatalf("RecordDurable while NATS is away: %v", err)
	}
	if n := val(m.SpoolReports); n != 1 {
		t.Fatalf("spool depth %v after RecordDurable with NATS away, want 1", n)
	}
	// Killed here: r is never closed. Its spool lock goes with the
	// process; the test releases it by hand, without a flush.
	r.AbandonForTest()

	srv.Restart(t)
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !js.Conn().IsConnected() {
			return errors.New("not reconnected")
		}
		return nil
	})
	r2, _ := newReporter(t, js, clk, spoolIn)
	if err := r2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reportOf(t, js, "a"); got.Spent != 5 || got.Refunded != 2 || got.Charged != 7 {
		t.Fatalf("report after the restart drained the spool: %+v, want spent 5, refunded 2, charged 7", got)
	}
	if err := r2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.RecordDurable(ctx, []limit.Usage{{Key: "a", WindowStart: t0, Refunded: 1}}); !errors.Is(err, ledger.ErrReporterClosed) {
		t.Fatalf("RecordDurable after Close: %v, want ErrReporterClosed", err)
	}
}

// A Reporter without CreateStream does not create the usage stream (the
// reconciler's role does): it spools until the stream exists, then sends
// the spool. With CreateStream (a process owning its embedded NATS) it
// creates it, with no age limit.
func TestReporterCreatesTheStreamOnlyWhenAllowed(t *testing.T) {
	ctx := context.Background()
	for _, create := range []bool{false, true} {
		t.Run(fmt.Sprintf("CreateStream=%v", create), func(t *testing.T) {
			nc, err := nats.Connect(testserver.StartNATS(t).URL)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			r, m := newReporter(t, js, clock.NewManual(t0.Add(time.Second)), func(c *ledger.Config) { c.CreateStream = create })
			r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 3}})
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			_, err = js.Stream(ctx, ledger.DefaultStream)
			if !create {
				if !errors.Is(err, jetstream.ErrStreamNotFound) {
					t.Fatalf("a limiter's Reporter created the usage stream (lookup: %v)", err)
				}
				if n := val(m.SpoolReports); n != 1 {
					t.Fatalf("spool depth %v without a stream, want 1", n)
				}
				if _, err := ledger.EnsureStream(ctx, js, ledger.DefaultStreamConfig()); err != nil { // the reconciler
					t.Fatal(err)
				}
				if err := r.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err != nil {
				t.Fatalf("the embedded-mode Reporter did not create the stream: %v", err)
			}
			if n := val(m.SpoolReports); n != 0 {
				t.Fatalf("spool depth %v with the stream there, want 0", n)
			}
			if got := reportOf(t, js, "a"); got.Spent != 3 {
				t.Fatalf("report %+v, want spent 3", got)
			}
			s, err := js.Stream(ctx, ledger.DefaultStream)
			if err != nil {
				t.Fatal(err)
			}
			if c := s.CachedInfo().Config; c.MaxAge != 0 || c.Discard != jetstream.DiscardNew {
				t.Fatalf("usage stream max age %v, discard %v: want no age limit, discard new", c.MaxAge, c.Discard)
			}
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The default stream configuration keeps reports until they are consumed:
// no age limit, bounded by bytes, refusing new reports when full. An age
// limit, when set, is at least the duplicate window.
func TestDefaultStreamHasNoAgeLimit(t *testing.T) {
	cfg := ledger.DefaultStreamConfig()
	if cfg.MaxAge != 0 || cfg.MaxBytes <= 0 {
		t.Fatalf("default stream config: max age %v, max bytes %d; want no age limit, a byte limit", cfg.MaxAge, cfg.MaxBytes)
	}
	for _, age := range []time.Duration{time.Second, -time.Hour} {
		c := cfg
		c.MaxAge = age
		// Validation comes first: no JetStream is needed to refuse.
		if _, err := ledger.EnsureStream(context.Background(), nil, c); err == nil || !strings.Contains(err.Error(), "MaxAge") {
			t.Errorf("MaxAge %v: %v, want an error naming MaxAge", age, err)
		}
	}
}

func histCount(h prometheus.Histogram) uint64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		panic(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// BenchmarkRecordDurable is the latency a refund or charge gains by being
// durable before its answer: JetStream's acknowledgement on loopback
// ("published"), or the spool's write and fsync while NATS is away
// ("spooled").
func BenchmarkRecordDurable(b *testing.B) {
	for _, connected := range []bool{true, false} {
		name := map[bool]string{true: "published", false: "spooled"}[connected]
		b.Run(name, func(b *testing.B) {
			srv := testserver.StartNATS(b)
			js := connect(b, srv.URL)
			if !connected {
				srv.Stop()
				testserver.WaitFor(b, 5*time.Second, time.Millisecond, func() error {
					if js.Conn().IsConnected() {
						return errors.New("still connected")
					}
					return nil
				})
			}
			r, _ := newReporter(b, js, clock.NewManual(t0.Add(time.Second)), nil)
			defer r.Close(context.Background())
			ctx := context.Background()
			u := []limit.Usage{{Key: "a", WindowStart: t0, Refunded: 1}}
			b.ResetTimer()
			for range b.N {
				if err := r.RecordDurable(ctx, u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A full usage stream (DiscardNew) refuses new reports; the Reporter
// keeps them in the spool, never losing them, and sends them once the
// stream takes reports again. (A message limit stands in for the byte
// limit: the refusal is the same.)
func TestFullStreamRefusalsAreSpooled(t *testing.T) {
	nc, err := nats.Connect(testserver.StartNATS(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sc := ledger.DefaultStreamConfig()
	full := jetstream.StreamConfig{Name: sc.Name, Subjects: []string{sc.SubjectPrefix + ".>"}, MaxMsgs: 1,
		Discard: jetstream.DiscardNew, Duplicates: sc.DuplicateWindow}
	if _, err := js.CreateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	r, m := newReporter(t, js, clock.NewManual(t0.Add(time.Second)), nil)
	r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 1}})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 2}})
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush into a full stream: %v", err)
	}
	if val(m.PublishErr) == 0 || val(m.SpoolReports) != 1 {
		t.Fatalf("full stream: publish errors %v, spool depth %v; want a refusal and the report spooled", val(m.PublishErr), val(m.SpoolReports))
	}
	full.MaxMsgs = -1
	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reportOf(t, js, "a"); got.Spent != 3 || val(m.SpoolReports) != 0 {
		t.Fatalf("after the stream took reports again: %+v, spool depth %v; want spent 3, empty spool", got, val(m.SpoolReports))
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
