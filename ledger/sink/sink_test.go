package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/ledger/sink"
)

var (
	nov = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	dec = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
)

// receiver is an OpenMeter-style CloudEvents receiver: it keeps the first
// event of each id and drops resends; it answers 503 while down.
type receiver struct {
	down       atomic.Bool
	mu         sync.Mutex
	deliveries int                  // guarded by mu: requests answered 2xx
	events     map[string]sink.Data // guarded by mu: by id
	order      []string             // guarded by mu: ids as first received
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rc.down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	ev, err := cehttp.NewEventFromHTTPRequest(r)
	if err != nil || ev.Validate() != nil || ev.Source() != sink.DefaultSource || ev.Type() != sink.DefaultType {
		http.Error(w, "bad event", http.StatusBadRequest)
		return
	}
	var d sink.Data
	if err := json.Unmarshal(ev.Data(), &d); err != nil || ev.Subject() != d.Key {
		http.Error(w, "bad data", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.deliveries++
	if _, seen := rc.events[ev.ID()]; !seen {
		rc.events[ev.ID()] = d
		rc.order = append(rc.order, ev.ID())
	}
	w.WriteHeader(http.StatusAccepted)
}

// billed is what the receiver bills per key: the sum of billed_delta over
// distinct events.
func (rc *receiver) billed() map[string]int64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]int64)
	for _, d := range rc.events {
		out[d.Key] += d.BilledDelta
	}
	return out
}

func (rc *receiver) counts() (deliveries, distinct int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.deliveries, len(rc.events)
}

type env struct {
	pool *pgxpool.Pool
	ex   *export.Exporter
	reg  *prometheus.Registry
	m    *sink.Metrics
}

func newEnv(t testing.TB) *env {
	t.Helper()
	_, pool := ledgertest.Database(t)
	ex, err := export.New(pool, export.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	return &env{pool: pool, ex: ex, reg: reg, m: sink.NewMetrics(reg)}
}

func (e *env) write(t *testing.T, key, proc string, start time.Time, spent int64, final bool) {
	t.Helper()
	rep := ledger.Report{Key: key, WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: proc, Region: "eu",
		Spent: spent, Final: final, Seq: 1, SentAt: start}
	if _, err := reconcile.NewWriter(e.pool).Write(context.Background(), []ledger.Report{rep}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) publisher(t *testing.T, name string, s sink.Sender) *sink.Publisher {
	t.Helper()
	p, err := sink.NewPublisher(e.pool, e.ex, s, sink.Config{Sink: name, Metrics: e.m})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func httpSink(t *testing.T) (*receiver, sink.Sender, string) {
	rc := &receiver{events: make(map[string]sink.Data)}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	s, err := sink.NewHTTP(srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return rc, s, srv.URL
}

// A closed period is billed once: a second run sends nothing, and a
// resend of the same period (the record lost, as after a crash between
// send and record) carries the same id and is dropped by the receiver.
func TestPeriodSentTwiceIsBilledOnce(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2026, 11, 7, 9, 0, 13, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 10, true)
	e.write(t, "acct_a", "p2", at, 5, true)
	e.write(t, "acct_b", "p1", at, 7, true)
	e.write(t, "acct_open", "p1", at, 3, false) // a process never sent its final: not closed
	rc, s, name := httpSink(t)
	p := e.publisher(t, name, s)
	ctx := context.Background()

	st, err := p.Run(ctx, nov, dec, now)
	if err != nil || st.Sent != 2 || st.Open != 1 || st.Difference != 0 {
		t.Fatalf("first run: %+v, %v", st, err)
	}
	st, err = p.Run(ctx, nov, dec, now)
	if d, _ := rc.counts(); err != nil || st.Sent+st.Corrections+st.Resent != 0 || st.Unchanged != 2 || d != 2 {
		t.Fatalf("second run: %+v, %v; %d deliveries", st, err, d)
	}
	if _, err := e.pool.Exec(ctx, `DELETE FROM billing_sink_events`); err != nil {
		t.Fatal(err)
	}
	if st, err = p.Run(ctx, nov, dec, now); err != nil || st.Sent != 2 {
		t.Fatalf("run after losing the record: %+v, %v", st, err)
	}
	d, distinct := rc.counts()
	billed := rc.billed()
	if d != 4 || distinct != 2 || billed["acct_a"] != 15 || billed["acct_b"] != 7 || len(billed) != 2 {
		t.Fatalf("%d deliveries, %d distinct events, billed %v; want 4, 2, acct_a 15 acct_b 7", d, distinct, billed)
	}
	if id := sink.EventID("acct_a", nov, export.Month, 0); rc.events[id].Net != 15 || rc.events[id].Billed != 15 {
		t.Fatalf("event %s: %+v", id, rc.events[id])
	}
}

// A late report to a period already sent produces exactly one correction,
// which names the event it replaces and carries the change.
func TestLateReportSendsOneCorrection(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2026, 11, 20, 9, 0, 13, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 10, true)
	rc, s, name := httpSink(t)
	p := e.publisher(t, name, s)
	ctx := context.Background()
	if st, err := p.Run(ctx, nov, dec, now); err != nil || st.Sent != 1 {
		t.Fatalf("first run: %+v, %v", st, err)
	}
	e.write(t, "acct_a", "p1~late1", at, 4, true) // a late row of the same window
	for i, want := range []int{1, 0} {
		st, err := p.Run(ctx, nov, dec, now)
		if err != nil || st.Corrections != want || st.Sent != 0 || st.Difference != 0 {
			t.Fatalf("run %d after the late report: %+v, %v; want %d correction", i, st, err, want)
		}
	}
	first, fix := sink.EventID("acct_a", nov, export.Month, 0), sink.EventID("acct_a", nov, export.Month, 1)
	rc.mu.Lock()
	order, got := append([]string(nil), rc.order...), rc.events[fix]
	rc.mu.Unlock()
	if len(order) != 2 || order[1] != fix || got.Replaces != first || got.Revision != 1 || got.Billed != 14 ||
		got.PreviousBilled != 10 || got.BilledDelta != 4 {
		t.Fatalf("events %v, correction %+v", order, got)
	}
	if b := rc.billed()["acct_a"]; b != 14 {
		t.Fatalf("billed %d, want 14", b)
	}
}

// A sink answering 503 stops the run and leaves a difference; once it
// answers again, the next run catches up: every period billed once.
func TestSinkDownCatchesUp(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var total int64
	for i, key := range []string{"k1", "k2", "k3", "k4"} {
		at := time.Date(2026, 11, 1+i, 0, 0, 0, 0, time.UTC)
		e.write(t, key, "p1", at, int64(10*(i+1)), true)
		total += int64(10 * (i + 1))
	}
	rc, s, name := httpSink(t)
	p := e.publisher(t, name, s)
	if st, err := p.Run(ctx, nov, dec, now); err != nil || st.Sent != 4 {
		t.Fatalf("first run: %+v, %v", st, err)
	}
	e.write(t, "k2", "p2", time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), 5, true) // a correction to send
	e.write(t, "k5", "p1", time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC), 50, true)
	e.write(t, "k6", "p1", time.Date(2026, 11, 6, 0, 0, 0, 0, time.UTC), 60, true)
	total += 5 + 50 + 60

	rc.down.Store(true)
	st, err := p.Run(ctx, nov, dec, now)
	if !errors.Is(err, sink.ErrSinkRefused) || st.Corrections+st.Sent != 0 || st.Difference != 115 {
		t.Fatalf("run with the sink down: %+v, %v", st, err)
	}
	if g := testutil.ToFloat64(e.m.Difference(name)); g != 115 {
		t.Fatalf("quota_billing_sink_difference = %v, want 115", g)
	}
	rows, err := sink.Report(ctx, e.pool, "", export.Month, "", nov, dec, now)
	if err != nil || len(rows) != 1 || rows[0].Closed != total || rows[0].Acked != total-115 || rows[0].Unacked != 1 {
		t.Fatalf("report while down: %+v, %v", rows, err)
	}
	// Down for a second run too: the same refused event again.
	if _, err := p.Run(ctx, nov, dec, now); !errors.Is(err, sink.ErrSinkRefused) {
		t.Fatalf("second run down: %v", err)
	}

	rc.down.Store(false)
	st, err = p.Run(ctx, nov, dec, now)
	if err != nil || st.Resent != 1 || st.Corrections != 0 || st.Sent != 2 || st.Difference != 0 {
		t.Fatalf("run after the sink is back: %+v, %v", st, err)
	}
	if st, err = p.Run(ctx, nov, dec, now); err != nil || st.Unchanged != 6 || st.Sent+st.Corrections+st.Resent != 0 {
		t.Fatalf("a further run: %+v, %v", st, err)
	}
	billed, var_ := rc.billed(), int64(0)
	for _, b := range billed {
		var_ += b
	}
	if _, distinct := rc.counts(); distinct != 7 || var_ != total || billed["k2"] != 25 {
		t.Fatalf("%d distinct events, billed %v (sum %d); want 7 events, sum %d", distinct, billed, var_, total)
	}
	if g := testutil.ToFloat64(e.m.Difference(name)); g != 0 {
		t.Fatalf("quota_billing_sink_difference = %v after catching up", g)
	}
	rows, err = sink.Report(ctx, e.pool, name, export.Month, "", nov, dec, now)
	if err != nil || len(rows) != 1 || rows[0].Difference() != 0 || rows[0].Ledger != total || rows[0].Unacked != 0 {
		t.Fatalf("report after catching up: %+v, %v", rows, err)
	}
}

// Events to a NATS subject land in a JetStream stream, deduplicated by
// their id when sent again.
func TestNATSSubject(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.write(t, "acct_a", "p1", time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC), 9, true)
	e.write(t, "acct_b", "p1", time.Date(2026, 11, 4, 0, 0, 0, 0, time.UTC), 8, true)
	nc, err := nats.Connect(testserver.StartNATS(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BILLING", Subjects: []string{"billing.usage"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sink.NewNATS(js, "billing.usage")
	if err != nil {
		t.Fatal(err)
	}
	p := e.publisher(t, "nats:billing.usage", s)
	for range 2 {
		if st, err := p.Run(ctx, nov, dec, now); err != nil || st.Sent != 2 {
			t.Fatalf("run: %+v, %v", st, err)
		}
		if _, err := e.pool.Exec(ctx, `DELETE FROM billing_sink_events`); err != nil {
			t.Fatal(err)
		}
	}
	info, err := stream.Info(ctx)
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages (%v), want 2", info.State.Msgs, err)
	}
	msg, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var ce struct {
		ID, Subject string
		Data        sink.Data
	}
	if err := json.Unmarshal(msg.Data, &ce); err != nil || ce.ID != sink.EventID("acct_a", nov, export.Month, 0) ||
		ce.Subject != "acct_a" || ce.Data.Net != 9 || msg.Header.Get("Content-Type") != "application/cloudevents+json" {
		t.Fatalf("message %s %v: %+v, %v", msg.Data, msg.Header, ce, err)
	}
}
