package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/ledger/sink"
)

// eventReceiver is a CloudEvents receiver over HTTP that keeps every
// event's data by id.
type eventReceiver struct {
	mu     sync.Mutex
	events map[string]sink.Data // guarded by mu
}

func (rc *eventReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ev, err := cehttp.NewEventFromHTTPRequest(r)
	var d sink.Data
	if err != nil || json.Unmarshal(ev.Data(), &d) != nil {
		http.Error(w, "bad event", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.events[ev.ID()] = d
	rc.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

func (rc *eventReceiver) all() []sink.Data {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []sink.Data
	for _, d := range rc.events {
		out = append(out, d)
	}
	return out
}

// billingEnv is what finance reads a ledger through: GET /v1/usage, the
// exporter, and a sink publishing to a real HTTP receiver.
type billingEnv struct {
	usage *httptest.Server
	ex    *export.Exporter
	pub   *sink.Publisher
	recv  *eventReceiver
}

const billingToken = "closer-test-token-0123456789"

func newBillingEnv(t *testing.T, pool *pgxpool.Pool) *billingEnv {
	t.Helper()
	l, err := billing.NewLedger(pool, billing.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := billing.ParseTokens(billingToken)
	if err != nil {
		t.Fatal(err)
	}
	access, err := billing.NewAccess(tokens)
	if err != nil {
		t.Fatal(err)
	}
	e := &billingEnv{recv: &eventReceiver{events: map[string]sink.Data{}}}
	e.usage = httptest.NewServer(&billing.Handler{Ledger: l, Access: access})
	t.Cleanup(e.usage.Close)
	recvSrv := httptest.NewServer(e.recv)
	t.Cleanup(recvSrv.Close)
	if e.ex, err = export.New(pool, export.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	send, err := sink.NewHTTP(recvSrv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e.pub, err = sink.NewPublisher(pool, e.ex, send, sink.Config{Sink: "test-receiver"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// getUsage answers GET /v1/usage for key over [from, to) by day.
func (e *billingEnv) getUsage(t *testing.T, key string, from, to time.Time) billing.Result {
	t.Helper()
	q := url.Values{"key": {key}, "from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "granularity": {"day"}}
	req, _ := http.NewRequest(http.MethodGet, e.usage.URL+"/v1/usage?"+q.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+billingToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res billing.Result
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&res) != nil {
		t.Fatalf("GET /v1/usage: %s", resp.Status)
	}
	return res
}

// exportRow is key's export row of the month starting at month.
func (e *billingEnv) exportRow(t *testing.T, key string, month, now time.Time) export.Row {
	t.Helper()
	var got []export.Row
	err := e.ex.Export(context.Background(), export.Query{From: month, To: month.AddDate(0, 1, 0), Granularity: export.Month, Now: now},
		func(rows []export.Row) error {
			for _, r := range rows {
				if r.Key == key {
					got = append(got, r)
				}
			}
			return nil
		})
	if err != nil || len(got) != 1 {
		t.Fatalf("export of %s: %d rows, %v", key, len(got), err)
	}
	return got[0]
}

// writeAt writes reports and then dates their rows' updated_at and
// first_seen to their sent_at, as if the reconciler had written them then.
func writeAt(t *testing.T, pool *pgxpool.Pool, reps []ledger.Report) {
	t.Helper()
	ctx := context.Background()
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		if _, err := pool.Exec(ctx, `UPDATE usage_reports SET updated_at = $4, first_seen = $4
WHERE key = $1 AND window_start = $2 AND process_id = $3`, r.Key, r.WindowStart, r.ProcessID, r.SentAt); err != nil {
			t.Fatal(err)
		}
	}
}

func newCloser(t *testing.T, pool *pgxpool.Pool, tune func(*reconcile.CloserConfig)) (*reconcile.Closer, *reconcile.CloserMetrics) {
	t.Helper()
	cfg := reconcile.DefaultCloserConfig()
	cfg.Metrics = reconcile.NewCloserMetrics(nil)
	cfg.Name = "test-closer"
	if tune != nil {
		tune(&cfg)
	}
	c, err := reconcile.NewCloser(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, cfg.Metrics
}

// TestCloserCompletesADeadProcessesPeriod is issue 27's scenario 1: a key's
// month has 100 final rows of two live processes and 50 non-final rows of
// one that was killed. Before the closer, the month is never complete, so
// no sink sends it and the sink report's difference is 0 (the alert stays
// silent). A pass 90 days later closes the dead process's rows: /v1/usage
// and the export say complete, and a sink run sends the month, billing
// every process's usage.
func TestCloserCompletesADeadProcessesPeriod(t *testing.T) {
	_, pool := ledgertest.Database(t)
	ctx := context.Background()
	const key = "acct_scenario1"
	month := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	first := month.Add(9 * 24 * time.Hour)
	var reps []ledger.Report
	for i := range 50 {
		start := first.Add(time.Duration(i) * time.Minute)
		for _, p := range []struct {
			proc  string
			spent int64
			final bool
		}{{"eu-live-1", 3, true}, {"eu-live-2", 3, true}, {"eu-dead", 2, false}} {
			reps = append(reps, ledger.Report{Key: key, WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: p.proc,
				Region: "eu", Spent: p.spent, Leased: p.spent, Final: p.final, Seq: 1, SentAt: start.Add(30 * time.Second)})
		}
	}
	writeAt(t, pool, reps)
	now := first.Add(90 * 24 * time.Hour)
	env := newBillingEnv(t, pool)

	st, err := env.pub.Run(ctx, month, month.AddDate(0, 1, 0), now)
	if err != nil || st.Sent != 0 || st.Open != 1 || st.Difference != 0 {
		t.Fatalf("before closing: %+v, %v; want sent 0, open 1, difference 0 (the month is held back)", st, err)
	}

	closer, m := newCloser(t, pool, nil)
	n, err := closer.Close(ctx, now)
	if err != nil || n != 50 {
		t.Fatalf("Close closed %d rows, %v; want the dead process's 50", n, err)
	}
	if got := testutil.ToFloat64(m.Closed); got != 50 {
		t.Fatalf("windows_closed_total = %v, want 50", got)
	}
	if n, err := closer.Close(ctx, now.Add(time.Minute)); err != nil || n != 0 {
		t.Fatalf("second pass closed %d, %v; want 0", n, err)
	}

	res := env.getUsage(t, key, month, month.AddDate(0, 1, 0))
	if !res.Complete || res.Totals.Net != 400 || res.ClosedByReconciler != 50 {
		t.Fatalf("/v1/usage: complete %v, net %d, closed_by_reconciler %d; want true, 400, 50",
			res.Complete, res.Totals.Net, res.ClosedByReconciler)
	}
	row := env.exportRow(t, key, month, now)
	if !row.Complete || row.Billed != 400 || row.ClosedByReconciler != 50 || row.Windows != 50 {
		t.Fatalf("export row %+v; want complete, billed 400, 50 windows all closed by the reconciler", row)
	}
	for _, f := range []export.Format{export.CSV, export.NDJSON} {
		var b strings.Builder
		enc := export.NewEncoder(&b, f, export.Month)
		if err := enc.Rows([]export.Row{row}); err != nil {
			t.Fatal(err)
		}
		if want := map[export.Format]string{export.CSV: ",400,0,50,", export.NDJSON: `"carried_out":0,"closed_by_reconciler":50,`}[f]; !strings.Contains(b.String(), want) {
			t.Fatalf("%s export lacks %q:\n%s", f, want, b.String())
		}
	}
	st, err = env.pub.Run(ctx, month, month.AddDate(0, 1, 0), now)
	if err != nil || st.Sent != 1 || st.Open != 0 || st.Difference != 0 {
		t.Fatalf("after closing: %+v, %v; want sent 1, open 0", st, err)
	}
	evs := env.recv.all()
	if len(evs) != 1 || evs[0].Billed != 400 || evs[0].ClosedByReconciler != 50 {
		t.Fatalf("events %+v; want one billing 400 with closed_by_reconciler 50", evs)
	}
	var closedBy string
	var closedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT closed_by, closed_at FROM usage_reports WHERE process_id = 'eu-dead' LIMIT 1`).Scan(&closedBy, &closedAt); err != nil ||
		closedBy != "test-closer" || !closedAt.Equal(now) {
		t.Fatalf("closed_by %q closed_at %v (%v); want test-closer at %v", closedBy, closedAt, err, now)
	}
}

// TestCloserLateReportLands: a report of a closed row that comes later
// (higher seq, more spent) is merged all the same; the row stays final and
// closed, usage_closed_windows says a late report came, and the sink sends
// a correction with the new figures.
func TestCloserLateReportLands(t *testing.T) {
	_, pool := ledgertest.Database(t)
	ctx := context.Background()
	const key = "acct_late"
	month := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	start := month.Add(24 * time.Hour)
	r := ledger.Report{Key: key, WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: "eu-slow", Region: "eu",
		Spent: 10, Leased: 10, Seq: 3, SentAt: start.Add(20 * time.Second)}
	writeAt(t, pool, []ledger.Report{r})
	closeAt := time.Now().Add(-time.Hour) // before the late report's write
	closer, _ := newCloser(t, pool, nil)
	if n, err := closer.Close(ctx, closeAt); err != nil || n != 1 {
		t.Fatalf("Close: %d, %v", n, err)
	}
	env := newBillingEnv(t, pool)
	if st, err := env.pub.Run(ctx, month, month.AddDate(0, 1, 0), closeAt); err != nil || st.Sent != 1 {
		t.Fatalf("first sink run: %+v, %v", st, err)
	}

	late := r
	late.Seq, late.Spent, late.Leased, late.Final, late.SentAt = 5, 14, 14, true, start.Add(70*time.Second)
	res, err := reconcile.NewWriter(pool).Write(ctx, []ledger.Report{late})
	if err != nil || res.Updated != 1 {
		t.Fatalf("late report: %+v, %v; want the row updated", res, err)
	}
	var spent, seq int64
	var final, lateReport bool
	if err := pool.QueryRow(ctx, `SELECT r.spent, r.seq, r.final, c.late_report FROM usage_reports r
JOIN usage_closed_windows c USING (key, window_start, process_id) WHERE r.key = $1`, key).Scan(&spent, &seq, &final, &lateReport); err != nil {
		t.Fatal(err)
	}
	if spent != 14 || seq != 5 || !final || !lateReport {
		t.Fatalf("row after the late report: spent %d seq %d final %v late_report %v; want 14, 5, true, true", spent, seq, final, lateReport)
	}
	if u := env.getUsage(t, key, month, month.AddDate(0, 1, 0)); !u.Complete || u.Totals.Net != 14 || u.ClosedByReconciler != 1 {
		t.Fatalf("/v1/usage after the late report: %+v", u)
	}
	st, err := env.pub.Run(ctx, month, month.AddDate(0, 1, 0), time.Now())
	if err != nil || st.Corrections != 1 || st.Difference != 0 {
		t.Fatalf("sink run after the late report: %+v, %v; want one correction", st, err)
	}
	var billed []int64
	for _, d := range env.recv.all() {
		billed = append(billed, d.Billed)
	}
	if len(billed) != 2 || billed[0]+billed[1] != 24 {
		t.Fatalf("events billed %v; want 10 then its correction to 14", billed)
	}
}

// TestCloserLeavesLiveProcesses: only rows whose window ended more than
// After ago and whose last report is older than After are closed.
func TestCloserLeavesLiveProcesses(t *testing.T) {
	_, pool := ledgertest.Database(t)
	ctx := context.Background()
	const after = 15 * time.Minute
	now := time.Now().Add(time.Hour) // after every write of the test
	tests := []struct {
		name       string
		windowEnd  time.Time
		lastReport time.Time
		final      bool
		wantClosed bool
	}{
		{"dead: window and report older than after", now.Add(-time.Hour), now.Add(-time.Hour - 30*time.Second), false, true},
		{"dead just past after", now.Add(-after - time.Second), now.Add(-after - 2*time.Second), false, true},
		{"window ended within after", now.Add(-after + time.Second), now.Add(-time.Hour), false, false},
		{"window still open", now.Add(time.Minute), now.Add(-time.Hour), false, false},
		{"reported within after (late but alive)", now.Add(-time.Hour), now.Add(-time.Minute), false, false},
		{"final: nothing to close", now.Add(-time.Hour), now.Add(-time.Hour), true, false},
	}
	for i, tt := range tests {
		r := ledger.Report{Key: "acct_live", WindowStart: tt.windowEnd.Add(-time.Minute), WindowEnd: tt.windowEnd,
			ProcessID: "p" + string(rune('a'+i)), Region: "eu", Spent: 1, Final: tt.final, Seq: 1, SentAt: tt.lastReport}
		writeAt(t, pool, []ledger.Report{r})
	}
	closer, _ := newCloser(t, pool, func(c *reconcile.CloserConfig) { c.After = after })
	n, err := closer.Close(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	closed := 0
	for i, tt := range tests {
		var isClosed bool
		if err := pool.QueryRow(ctx, `SELECT closed_at IS NOT NULL FROM usage_reports WHERE process_id = $1`,
			"p"+string(rune('a'+i))).Scan(&isClosed); err != nil {
			t.Fatal(err)
		}
		if isClosed != tt.wantClosed {
			t.Errorf("%s: closed %v, want %v", tt.name, isClosed, tt.wantClosed)
		}
		if isClosed {
			closed++
		}
	}
	if n != closed {
		t.Fatalf("Close returned %d, %d rows are closed", n, closed)
	}
}

// TestCloserBoundedPasses: with small batches a pass over several months
// goes on over several ticks, each within BatchesPerTick statements, and a
// row it had to leave open (its process reported recently) is closed by a
// later pass once it falls due.
func TestCloserBoundedPasses(t *testing.T) {
	_, pool := ledgertest.Database(t)
	ctx := context.Background()
	now := time.Now().Add(time.Hour)
	var reps []ledger.Report
	for m := range 3 {
		base := time.Date(2026, time.Month(4+m), 3, 0, 0, 0, 0, time.UTC)
		for i := range 12 {
			s := base.Add(time.Duration(i) * time.Minute)
			reps = append(reps, ledger.Report{Key: "acct_bulk", WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: "eu-dead",
				Region: "eu", Spent: 1, Seq: 1, SentAt: s.Add(time.Second)})
		}
	}
	writeAt(t, pool, reps)
	// A row of the oldest month whose process reported a minute ago (a
	// spool replayed late): not due yet.
	s := time.Date(2026, 4, 5, 0, 0, 0, 0, time.UTC)
	writeAt(t, pool, []ledger.Report{{Key: "acct_bulk", WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: "eu-replayed",
		Region: "eu", Spent: 1, Seq: 1, SentAt: now.Add(-time.Minute)}})

	closer, m := newCloser(t, pool, func(c *reconcile.CloserConfig) { c.BatchRows, c.BatchesPerTick = 5, 3 })
	var passes []int
	for tick := 0; tick < 40; tick++ {
		n, err := closer.Close(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if n > 15 {
			t.Fatalf("tick %d closed %d rows, more than BatchesPerTick × BatchRows", tick, n)
		}
		passes = append(passes, n)
		if testutil.ToFloat64(m.Closed) == 36 && n == 0 {
			break
		}
	}
	if got := testutil.ToFloat64(m.Closed); got != 36 || len(passes) < 3 {
		t.Fatalf("closed %v rows over ticks %v; want all 36 over several ticks", got, passes)
	}
	var open int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_reports WHERE NOT final`).Scan(&open); err != nil || open != 1 {
		t.Fatalf("%d rows open (%v); want the replayed one", open, err)
	}
	// Later, its process silent since: a pass goes back for it (the
	// current one ends first).
	closedLate := 0
	for tick := 0; tick < 10 && closedLate == 0; tick++ {
		n, err := closer.Close(ctx, now.Add(20*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		closedLate += n
	}
	if closedLate != 1 {
		t.Fatalf("passes after the replayed row fell due closed %d; want 1", closedLate)
	}
}

// TestCloserFindsRowsWrittenBehindIt: a row first written after the passes
// went past its window_start (a process that started mid-window, a spool
// replayed after an outage) is closed by a later pass, not left for the
// next Rescan.
func TestCloserFindsRowsWrittenBehindIt(t *testing.T) {
	_, pool := ledgertest.Database(t)
	ctx := context.Background()
	closer, _ := newCloser(t, pool, func(c *reconcile.CloserConfig) { c.After = time.Second })
	if _, err := closer.Close(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	s := time.Now().Add(-time.Hour).UTC()
	r := ledger.Report{Key: "acct_behind", WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: "eu-replayed", Region: "eu",
		Spent: 4, Seq: 1, SentAt: s.Add(time.Second)}
	if _, err := reconcile.NewWriter(pool).Write(ctx, []ledger.Report{r}); err != nil {
		t.Fatal(err)
	}
	closed := 0
	for pass := 0; pass < 3 && closed == 0; pass++ {
		n, err := closer.Close(ctx, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		closed += n
	}
	if closed != 1 {
		t.Fatalf("closed %d rows in three passes; want the row written behind the passes", closed)
	}
}

// TestCloserRun: Run passes at once and then at every tick of its clock,
// and returns when its context ends.
func TestCloserRun(t *testing.T) {
	_, pool := ledgertest.Database(t)
	start := time.Now().Add(time.Hour) // after every write of the test
	clk := clock.NewManual(start)
	closer, m := newCloser(t, pool, func(c *reconcile.CloserConfig) { c.Clock, c.Interval = clk, time.Minute })
	s := start.Add(-time.Hour)
	writeAt(t, pool, []ledger.Report{{Key: "acct_run", WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: "eu-dead",
		Region: "eu", Spent: 1, Seq: 1, SentAt: s}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- closer.Run(ctx) }()
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := testutil.ToFloat64(m.Closed); n != 1 {
			return fmt.Errorf("first pass closed %v rows", n)
		}
		return nil
	})
	// A second dead process, written after the first pass, behind it.
	writeAt(t, pool, []ledger.Report{{Key: "acct_run", WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: "eu-dead-2",
		Region: "eu", Spent: 1, Seq: 1, SentAt: s}})
	if _, err := pool.Exec(context.Background(), `UPDATE usage_reports SET first_seen = now() WHERE process_id = 'eu-dead-2'`); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		clk.Advance(time.Minute)
		if n := testutil.ToFloat64(m.Closed); n != 2 {
			return fmt.Errorf("passes closed %v rows, want 2", n)
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}

func TestCloserConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*reconcile.CloserConfig)
		want string
	}{
		{"zero after", func(c *reconcile.CloserConfig) { c.After = 0 }, "After"},
		{"negative after", func(c *reconcile.CloserConfig) { c.After = -time.Second }, "After"},
		{"zero interval", func(c *reconcile.CloserConfig) { c.Interval = 0 }, "Interval"},
		{"no batch rows", func(c *reconcile.CloserConfig) { c.BatchRows = 0 }, "BatchRows"},
		{"one batch per tick", func(c *reconcile.CloserConfig) { c.BatchesPerTick = 1 }, "BatchesPerTick"},
		{"no rescan", func(c *reconcile.CloserConfig) { c.Rescan = 0 }, "Rescan"},
		{"no name", func(c *reconcile.CloserConfig) { c.Name = "" }, "Name"},
	}
	for _, tt := range tests {
		cfg := reconcile.DefaultCloserConfig()
		tt.mod(&cfg)
		if _, err := reconcile.NewCloser(nil, cfg); err == nil || !strings.Contains(err.Error(), "config "+tt.want+":") {
			t.Errorf("%s: err %v, want one naming %s", tt.name, err, tt.want)
		}
	}
}
