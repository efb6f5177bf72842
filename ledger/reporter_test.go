package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

func connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.EnsureStream(context.Background(), js, ledger.DefaultStreamConfig()); err != nil {
		t.Fatal(err)
	}
	return js
}

// latest reads the stream and returns the latest report per (process, key,
// window) and the number of reports in it (a batch message holds many).
func latest(t testing.TB, js jetstream.JetStream) (map[string]ledger.Report, int) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ledger.Report{}
	reports := 0
	// Read by sequence, not with a consumer: a work-queue stream takes no
	// second consumer beside a reconciler's, and this one must not ack.
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		reps, err := ledger.DecodeMessage(m.Header.Get(ledger.HeaderEncoding), m.Data)
		if err != nil {
			t.Fatalf("stream holds an invalid message: %v", err)
		}
		for _, r := range reps {
			reports++
			id := r.ProcessID + "|" + r.Key + "|" + r.WindowStart.String()
			if old, ok := out[id]; !ok || r.Seq > old.Seq {
				out[id] = r
			}
		}
	}
	return out, reports
}

func newReporter(t testing.TB, js jetstream.JetStream, clk clock.Clock, mod func(*ledger.Config)) (*ledger.Reporter, *ledger.Metrics) {
	t.Helper()
	cfg := ledger.DefaultConfig()
	cfg.ProcessID = "p1"
	cfg.Region = "eu"
	cfg.SpoolDir = t.TempDir()
	cfg.Clock = clk
	cfg.PublishTimeout = 500 * time.Millisecond
	cfg.Metrics = ledger.NewMetrics(nil)
	cfg.AppendIncarnation = false
	if mod != nil {
		mod(&cfg)
	}
	r, err := ledger.NewReporter(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, cfg.Metrics
}

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func TestReporterCumulativeAndFinal(t *testing.T) {
	js := connect(t, testserver.StartNATS(t).URL)
	clk := clock.NewManual(t0.Add(time.Second))
	r, _ := newReporter(t, js, clk, nil)
	ctx := context.Background()
	w := t0 // window start of both keys

	type want struct {
		spent, leased int64
		final         bool
		seq           int64
	}
	steps := []struct {
		name   string
		at     time.Duration // clock offset from t0
		record []limit.Usage
		msgs   int // total reports in the stream after Flush
		want   map[string]want
	}{
		{"first deltas", time.Second, []limit.Usage{
			{Key: "a", WindowStart: w, Spent: 3, Leased: 5},
			{Key: "b", WindowStart: w, Spent: 1, Leased: 1, Rejected: 2},
			{Key: "a", WindowStart: w, Spent: 2, Leased: 0},
		}, 2, map[string]want{"a": {5, 5, false, 1}, "b": {1, 1, false, 1}}},
		{"no change, nothing sent", 2 * time.Second, nil, 2,
			map[string]want{"a": {5, 5, false, 1}, "b": {1, 1, false, 1}}},
		{"leased goes down", 10 * time.Second, []limit.Usage{{Key: "a", WindowStart: w, Spent: 1, Leased: -2}}, 3,
			map[string]want{"a": {6, 3, false, 2}, "b": {1, 1, false, 1}}},
		{"window over, in grace", time.Minute + time.Second, nil, 3,
			map[string]want{"a": {6, 3, false, 2}, "b": {1, 1, false, 1}}},
		{"after grace: finals", time.Minute + 2*time.Second, nil, 5,
			map[string]want{"a": {6, 3, true, 3}, "b": {1, 1, true, 2}}},
		{"finals are not repeated", time.Minute + 5*time.Second, nil, 5,
			map[string]want{"a": {6, 3, true, 3}, "b": {1, 1, true, 2}}},
		{"late delta: final again", time.Minute + 6*time.Second, []limit.Usage{{Key: "b", WindowStart: w, Spent: 1}}, 6,
			map[string]want{"a": {6, 3, true, 3}, "b": {2, 1, true, 3}}},
	}
	for _, st := range steps {
		clk.Set(t0.Add(st.at))
		r.Record(st.record)
		if err := r.Flush(ctx); err != nil {
			t.Fatalf("%s: Flush: %v", st.name, err)
		}
		got, n := latest(t, js)
		if n != st.msgs {
			t.Fatalf("%s: stream holds %d messages, want %d", st.name, n, st.msgs)
		}
		for key, wt := range st.want {
			rep := got["p1|"+key+"|"+w.String()]
			if rep.Spent != wt.spent || rep.Leased != wt.leased || rep.Final != wt.final || rep.Seq != wt.seq {
				t.Fatalf("%s: key %s: got %+v, want %+v", st.name, key, rep, wt)
			}
			if rep.Region != "eu" || !rep.WindowEnd.Equal(w.Add(time.Minute)) {
				t.Fatalf("%s: key %s: region/window_end %+v", st.name, key, rep)
			}
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReporterLoopReportsOnClockTicks drives Start's loop with a manual
// clock: it reports every ReportInterval of clock time, not before, and
// sends a window's final once its grace has passed.
func TestReporterLoopReportsOnClockTicks(t *testing.T) {
	js := connect(t, testserver.StartNATS(t).URL)
	clk := clock.NewManual(t0.Add(time.Second))
	r, m := newReporter(t, js, clk, nil)
	iv := ledger.DefaultConfig().ReportInterval
	r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 2}})
	r.Start()
	clk.BlockUntil(1) // the loop's ticker

	clk.Advance(iv - time.Nanosecond)
	if n := val(m.Published); n != 0 {
		t.Fatalf("published %v reports before the first tick", n)
	}
	published := func(want float64) {
		t.Helper()
		testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
			if n := val(m.Published); n != want {
				return fmt.Errorf("published %v reports, want %v", n, want)
			}
			return nil
		})
	}
	clk.Advance(time.Nanosecond)
	published(1)
	if rep := reportOf(t, js, "a"); rep.Spent != 2 || rep.Final || rep.Seq != 1 {
		t.Fatalf("first tick: %+v, want spent 2, not final, seq 1", rep)
	}

	// Past the window's end and grace: the next tick sends the final.
	clk.Set(t0.Add(time.Minute + 2*time.Second))
	published(2)
	if rep := reportOf(t, js, "a"); !rep.Final || rep.Seq != 2 {
		t.Fatalf("after grace: %+v, want final, seq 2", rep)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := clk.Waiters(); n != 0 {
		t.Fatalf("Waiters = %d after Close, want 0 (the loop's ticker stopped)", n)
	}
}

// reportOf returns the latest report of key's window t0 by process p1.
func reportOf(t *testing.T, js jetstream.JetStream, key string) ledger.Report {
	t.Helper()
	got, _ := latest(t, js)
	return got["p1|"+key+"|"+t0.String()]
}

func TestReporterLateDeltaAfterRetentionGetsOwnRow(t *testing.T) {
	js := connect(t, testserver.StartNATS(t).URL)
	clk := clock.NewManual(t0)
	r, m := newReporter(t, js, clk, func(c *ledger.Config) { c.Retention = 10 * time.Second })
	ctx := context.Background()
	r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 4}})
	clk.Set(t0.Add(time.Minute + 3*time.Second))
	if err := r.Flush(ctx); err != nil { // final
		t.Fatal(err)
	}
	clk.Set(t0.Add(time.Minute + 20*time.Second))
	if err := r.Flush(ctx); err != nil { // forgets the window
		t.Fatal(err)
	}
	r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 1}})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := latest(t, js)
	var total int64
	for _, rep := range got {
		if !rep.Final {
			t.Fatalf("not final: %+v", rep)
		}
		total += rep.Spent
	}
	if len(got) != 2 || total != 5 || val(m.LateDeltas) != 1 {
		t.Fatalf("rows %v total %d late %v; want 2 rows totalling 5", got, total, val(m.LateDeltas))
	}
}

func TestReporterSpoolsWhileNATSDown(t *testing.T) {
	srv := testserver.StartNATS(t)
	js := connect(t, srv.URL)
	clk := clock.NewManual(t0)
	r, m := newReporter(t, js, clk, nil)
	ctx := context.Background()

	r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 1}})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	testserver.WaitFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if js.Conn().IsConnected() {
			return errors.New("still connected")
		}
		return nil
	})
	for i := range 5 {
		clk.Set(t0.Add(time.Duration(i+1) * time.Second))
		r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 1}, {Key: "b", WindowStart: t0, Spent: 2}})
		if err := r.Flush(ctx); err != nil {
			t.Fatalf("Flush while NATS is down: %v", err)
		}
	}
	if n := val(m.SpoolReports); n != 2 {
		t.Fatalf("spool depth %v, want 2 (latest per key and window)", n)
	}
	if val(m.SpoolBytes) == 0 || val(m.Spooled) != 10 {
		t.Fatalf("spool bytes %v, spooled %v", val(m.SpoolBytes), val(m.Spooled))
	}
	srv.Restart(t)
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !js.Conn().IsConnected() {
			return errors.New("not reconnected")
		}
		return nil
	})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := val(m.SpoolReports); n != 0 {
		t.Fatalf("spool depth after drain %v", n)
	}
	got, _ := latest(t, js)
	if a, b := got["p1|a|"+t0.String()], got["p1|b|"+t0.String()]; a.Spent != 6 || b.Spent != 10 {
		t.Fatalf("after drain: a=%+v b=%+v", a, b)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReporterSpoolFullKeepsUsageInMemory(t *testing.T) {
	srv := testserver.StartNATS(t)
	js := connect(t, srv.URL)
	clk := clock.NewManual(t0)
	r, m := newReporter(t, js, clk, func(c *ledger.Config) { c.SpoolMaxBytes = 4096 })
	ctx := context.Background()
	srv.Stop()
	testserver.WaitFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if js.Conn().IsConnected() {
			return errors.New("still connected")
		}
		return nil
	})
	var batch []limit.Usage
	for i := range 100 {
		batch = append(batch, limit.Usage{Key: "key-" + string(rune('A'+i%26)) + string(rune('a'+i/26)), WindowStart: t0, Spent: int64(i + 1)})
	}
	r.Record(batch)
	if err := r.Flush(ctx); !errors.Is(err, ledger.ErrSpoolFull) {
		t.Fatalf("Flush with a full spool = %v, want ErrSpoolFull", err)
	}
	if val(m.SpoolFull) == 0 || val(m.SpoolFullNow) != 1 {
		t.Fatal("spool-full metrics not raised")
	}
	srv.Restart(t)
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !js.Conn().IsConnected() {
			return errors.New("not reconnected")
		}
		return nil
	})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := latest(t, js)
	var total int64
	for _, rep := range got {
		total += rep.Spent
		if !rep.Final {
			t.Fatalf("Close sent a non-final report: %+v", rep)
		}
	}
	if len(got) != 100 || total != 100*101/2 {
		t.Fatalf("after the spool was full: %d reports, spent %d; want 100 and %d", len(got), total, 100*101/2)
	}
	if val(m.SpoolFullNow) != 0 {
		t.Fatal("spool-full gauge still raised")
	}
}

// val reads a counter or gauge.
func val(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// TestReporterCarriesLargeCountsExactly: a cost above 2^32 that a Limiter
// admits reaches the stream exactly, and so do counts up to 2^53 − 1 (the
// reconciler's MaxCounter).
func TestReporterCarriesLargeCountsExactly(t *testing.T) {
	js := connect(t, testserver.StartNATS(t).URL)
	clk := clock.NewManual(t0.Add(time.Second))
	r, _ := newReporter(t, js, clk, nil)
	ctx := context.Background()

	const big = 5 << 30 // 5,368,709,120 > 2^32
	cfg := region.DefaultConfig()
	cfg.Usage = r
	lim, err := region.New(memstore.New(nil), limit.StaticPlans{Default: limit.Plan{Rate: 1, Capacity: limit.MaxCapacity}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Allow(ctx, "limited", big); err != nil || !d.Allowed {
		t.Fatalf("Allow(%d) = %+v, %v", big, d, err)
	}
	lim.Drain(ctx) // hands its usage to r

	const most = 1<<53 - 1
	r.Record([]limit.Usage{{Key: "huge", WindowStart: t0, Spent: most, Leased: -most, Rejected: most - 2, Degraded: most}})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := latest(t, js)
	var limited ledger.Report
	for _, rep := range got {
		if rep.Key == "limited" {
			limited = rep
		}
	}
	if limited.Spent != big || limited.Leased != big || !limited.Final {
		t.Fatalf("limited: %+v, want spent and leased %d, final", limited, int64(big))
	}
	if h := got["p1|huge|"+t0.String()]; h.Spent != most || h.Leased != -most || h.Rejected != most-2 || h.Degraded != most {
		t.Fatalf("huge: %+v, want ±%d exactly", h, int64(most))
	}
}

// TestReporterCapFreesWindowsEarly: with MaxKeys 10 and 50 keys' usage,
// the Reporter never holds more than MaxKeys − 1 plus one Record's new
// windows, and every key's spent reaches the stream exactly, with NATS up
// and with NATS down (through the spool), including deltas for windows it
// had already freed.
func TestReporterCapFreesWindowsEarly(t *testing.T) {
	const maxKeys, keys = 10, 50
	for _, natsDown := range []bool{false, true} {
		t.Run(fmt.Sprintf("nats down %v", natsDown), func(t *testing.T) {
			srv := testserver.StartNATS(t)
			js := connect(t, srv.URL)
			clk := clock.NewManual(t0.Add(time.Second)) // never advanced: no periodic flush
			r, m := newReporter(t, js, clk, func(c *ledger.Config) { c.MaxKeys = maxKeys })
			r.Start()
			clk.BlockUntil(1) // the loop waits on its ticker
			if natsDown {
				srv.Stop()
				testserver.WaitFor(t, 5*time.Second, 10*time.Millisecond, func() error {
					if js.Conn().IsConnected() {
						return errors.New("still connected")
					}
					return nil
				})
			}
			want := map[string]int64{}
			record := func(batch ...limit.Usage) {
				t.Helper()
				fresh := 0
				for _, u := range batch {
					if want[u.Key] == 0 {
						fresh++
					}
					want[u.Key] += u.Spent
				}
				r.Record(batch)
				if held := val(m.Entries); held > maxKeys-1+float64(fresh) {
					t.Fatalf("holding %v windows after a Record of %d new ones, cap %d", held, fresh, maxKeys)
				}
				// The early flush runs on the loop.
				testserver.WaitFor(t, 5*time.Second, time.Millisecond, func() error {
					if held := val(m.Entries); held >= maxKeys {
						return fmt.Errorf("holding %v windows", held)
					}
					return nil
				})
			}
			key := func(i int) string { return fmt.Sprintf("key-%02d", i) }
			for i := range keys - 20 {
				record(limit.Usage{Key: key(i), WindowStart: t0, Spent: int64(i + 1)})
				if i >= maxKeys+2 && i%4 == 3 {
					// A window freed early (more than MaxKeys newer ones
					// since) gets more usage: a row of its own.
					record(limit.Usage{Key: key(i - maxKeys - 2), WindowStart: t0, Spent: 100})
				}
			}
			var batch []limit.Usage // 20 new keys in one Record
			for i := keys - 20; i < keys; i++ {
				batch = append(batch, limit.Usage{Key: key(i), WindowStart: t0, Spent: int64(i + 1)})
			}
			record(batch...)
			if val(m.CapFlushes) == 0 || val(m.FreedEarly) < keys-maxKeys {
				t.Fatalf("%v early flushes freed %v windows, want at least %d", val(m.CapFlushes), val(m.FreedEarly), keys-maxKeys)
			}
			if natsDown {
				if val(m.Published) != 0 || val(m.SpoolReports) == 0 {
					t.Fatalf("published %v, spooled %v while NATS was down", val(m.Published), val(m.SpoolReports))
				}
				srv.Restart(t)
				testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
					if !js.Conn().IsConnected() {
						return errors.New("not reconnected")
					}
					return nil
				})
			}
			if err := r.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			got, _ := latest(t, js)
			spent := map[string]int64{}
			rows := 0
			for _, rep := range got {
				if !rep.Final {
					t.Fatalf("a row was left without its final report: %+v", rep)
				}
				spent[rep.Key] += rep.Spent
				rows++
			}
			if len(spent) != keys || rows <= keys {
				t.Fatalf("the stream holds %d rows for %d keys, want %d keys and a row more for each window freed and used again", rows, len(spent), keys)
			}
			for k, w := range want {
				if spent[k] != w {
					t.Fatalf("key %s: spent %d in the stream, want %d", k, spent[k], w)
				}
			}
			t.Logf("%d rows for %d keys; %v early flushes freed %v windows; %v separate rows",
				rows, keys, val(m.CapFlushes), val(m.FreedEarly), val(m.LateDeltas))
		})
	}
}

// TestReporterBatchesMessages: 20,000 keys' reports travel in a handful of
// messages (EncodingBatch), or one message each with EncodingJSON, and
// either way every report arrives exactly, would-be rejections included.
func TestReporterBatchesMessages(t *testing.T) {
	const keys = 20000
	for _, tt := range []struct {
		encoding string
		maxMsgs  int
	}{
		{ledger.EncodingBatch, 4},
		{ledger.EncodingJSON, keys},
	} {
		t.Run(tt.encoding, func(t *testing.T) {
			js := connect(t, testserver.StartNATS(t).URL)
			clk := clock.NewManual(t0.Add(time.Second))
			r, m := newReporter(t, js, clk, func(c *ledger.Config) {
				c.Encoding, c.MaxKeys = tt.encoding, 4*keys
				// The acks of a window of 20,000 JSON messages took over
				// 500 ms at a load average of 25 (the rest was spooled);
				// every publish here succeeds, so a long bound costs nothing.
				c.PublishTimeout = time.Minute
			})
			usage := make([]limit.Usage, keys)
			for i := range usage {
				usage[i] = limit.Usage{Key: fmt.Sprintf("acct-%05d", i), WindowStart: t0, Spent: int64(i), Leased: int64(i) + 1, WouldReject: int64(i % 3)}
			}
			r.Record(usage)
			if err := r.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			got, n := latest(t, js)
			if n != keys {
				t.Fatalf("stream holds %d reports, want %d", n, keys)
			}
			for _, u := range usage {
				rep := got["p1|"+u.Key+"|"+t0.String()]
				if rep.Spent != u.Spent || rep.Leased != u.Leased || rep.WouldReject != u.WouldReject {
					t.Fatalf("%s: got %+v, want %+v", u.Key, rep, u)
				}
			}
			msgs := int(val(m.Messages))
			if msgs < 1 || msgs > tt.maxMsgs {
				t.Fatalf("%d messages for %d reports, want 1 to %d", msgs, keys, tt.maxMsgs)
			}
			if p := val(m.Published); p != keys {
				t.Fatalf("reports published = %v, want %d", p, keys)
			}
		})
	}
}

// A flush that hands reports over is one span with what it did; a flush
// with nothing to do makes none.
func TestReporterTracesFlushes(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	js := connect(t, testserver.StartNATS(t).URL)
	clk := clock.NewManual(t0.Add(time.Second))
	r, _ := newReporter(t, js, clk, func(c *ledger.Config) { c.Tracer = tp.Tracer("test") })
	r.Record([]limit.Usage{{Key: "a", WindowStart: t0, Spent: 1}, {Key: "b", WindowStart: t0, Spent: 2}})
	ctx := context.Background()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil { // nothing changed
		t.Fatal(err)
	}
	spans := sr.Ended()
	if len(spans) != 1 || spans[0].Name() != "quota.ledger.flush" {
		t.Fatalf("spans %v, want one quota.ledger.flush", spans)
	}
	attrs := map[string]int64{}
	for _, kv := range spans[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInt64()
	}
	if attrs["quota.reports_due"] != 2 || attrs["quota.reports_published"] != 2 || attrs["quota.messages_published"] != 1 {
		t.Fatalf("span attributes %v, want 2 reports due and published in 1 message", attrs)
	}
}
