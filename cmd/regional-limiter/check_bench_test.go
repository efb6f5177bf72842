package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/baseline"
	"github.com/quotaplatform/quota/internal/testserver"
)

// The single check path, end to end, against a bare net/http handler that
// decodes the same JSON (the baseline make loadtest runs beside the daemon):
//
//	go test -run '^$' -bench 'Check' -benchmem ./cmd/regional-limiter/
//
// BenchmarkCheck calls each handler's ServeHTTP with one reused request
// and response writer, so B/op and allocs/op are the handler's own: for
// the daemon, the whole handler its http.Server serves (HTTP metrics,
// drain check, mux, check-token guard, decode, decision with usage
// recording, check metrics, headers, encode), on embedded defaults, with
// tracing off and on (checks without a traceparent). BenchmarkCheckHTTP
// sends the checks over a loopback keep-alive connection to an http.Server
// with the daemon's limits, so its B/op holds net/http's server (and this
// client's) allocations too, as the daemon's whole-process figure does.
//
// Each runs two plans: "leased", whose checks spend and renew leases as
// under make loadtest's spread (a key checked once per 10,000 checks often
// renews its small lease), and "exact", whose checks each make a store
// call (what the slow path costs around the engine: a store call's
// deadline and span).
//
// B/op and allocs/op include what the daemon's background loops (usage
// flushes each second, reports, gossip) allocate meanwhile. A daemon's
// B-ratio and allocs-ratio are its bytes and allocations per check over
// the bare handler's in the same run, each the median of checkWindows
// windows, so that a window with a background flush does not count: the
// request's own cost. TestCheckAllocationBudget (make bench-budget) fails
// when either exceeds allocBudget.

// checkKeys is the number of distinct keys the benchmarks cycle through,
// as make loadtest does.
const checkKeys = 10000

// Windows of the ratios: 15 of 1,000 checks, about 0.2 s in process and
// 1 s over loopback, of which a flush each second spoils one or two.
const (
	checkWindows    = 15
	checksPerWindow = 1000
)

// allocBudget is the most a daemon may allocate per check, in bytes and
// in allocations, over the bare handler.
const allocBudget = 1.1

// benchCheckToken is the daemons' --check-token.
const benchCheckToken = "bench-check-token-0123456789"

// checkPlans are the default plans the daemons check against: neither is
// exhausted by a benchmark.
var checkPlans = []struct{ name, body string }{
	{"leased", `{"rate":1e9,"capacity":1e9}`},
	{"exact", `{"rate":1e9,"capacity":1e9,"mode":"exact","failure_policy":"closed"}`},
}

// checkDaemons are the daemons the benchmarks load beside the bare handler.
var checkDaemons = []struct {
	name   string
	traced bool
}{
	{"daemon", false},
	{"daemon-traced", true},
}

// checkLoops are the ways of serving a check: a new loop serves the i-th
// body (in turn) to h with the Authorization value auth, and fails tb
// unless the check was allowed.
var checkLoops = []struct {
	name string
	new  func(tb testing.TB, h http.Handler, auth string) func(int)
}{
	{"handler", newServeLoop},
	{"http", newHTTPLoop},
}

func BenchmarkCheck(b *testing.B)     { benchCheck(b, newServeLoop) }
func BenchmarkCheckHTTP(b *testing.B) { benchCheck(b, newHTTPLoop) }

// benchCheck runs the bare handler and every daemon, on every plan,
// through loops made by newLoop.
func benchCheck(b *testing.B, newLoop func(tb testing.TB, h http.Handler, auth string) func(int)) {
	for _, plan := range checkPlans {
		b.Run(plan.name+"/bare", func(b *testing.B) {
			loopChecks(b, newLoop(b, baseline.CheckHandler(), ""))
		})
		for _, d := range checkDaemons {
			b.Run(plan.name+"/"+d.name, func(b *testing.B) {
				bare := newLoop(b, baseline.CheckHandler(), "")
				daemon := newLoop(b, benchDaemonHandler(b, plan.body, d.traced), "Bearer "+benchCheckToken)
				loopChecks(b, daemon)
				warm(bare)
				bytes, allocs := allocRatios(bare, daemon)
				b.ReportMetric(bytes, "B-ratio")
				b.ReportMetric(allocs, "allocs-ratio")
			})
		}
	}
}

// loopChecks serves every key once (so that every key's state exists, as
// at steady state), then checks in b.Loop.
func loopChecks(b *testing.B, serve func(int)) {
	warm(serve)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		serve(i)
		i++
	}
}

func warm(serve func(int)) {
	for i := range checkKeys {
		serve(i)
	}
}

// perCheck is what a server allocated per check: the median of
// checkWindows windows.
type perCheck struct{ bytes, allocs float64 }

// allocRatios returns daemon's bytes and allocations per check over
// bare's, each the median of checkWindows windows, the two servers'
// windows taken in turn. Both are warm.
func allocRatios(bare, daemon func(int)) (bytes, allocs float64) {
	b, d := measureBeside(bare, daemon)
	return d.bytes / b.bytes, d.allocs / b.allocs
}

// measureBeside measures bare and daemon per check, window by window in
// turn.
func measureBeside(bare, daemon func(int)) (b, d perCheck) {
	var bb, ba, db, da []float64
	for w := range checkWindows {
		x, y := measureWindow(bare, w*checksPerWindow)
		bb, ba = append(bb, x), append(ba, y)
		x, y = measureWindow(daemon, w*checksPerWindow)
		db, da = append(db, x), append(da, y)
	}
	return perCheck{median(bb), median(ba)}, perCheck{median(db), median(da)}
}

// measureWindow serves checksPerWindow checks from the from-th and returns
// the bytes and allocations per check the process made meanwhile.
func measureWindow(serve func(int), from int) (bytes, allocs float64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range checksPerWindow {
		serve(from + i)
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / checksPerWindow,
		float64(after.Mallocs-before.Mallocs) / checksPerWindow
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

func checkBodies() [][]byte {
	bodies := make([][]byte, checkKeys)
	for i := range bodies {
		bodies[i] = []byte(`{"key":"lt_` + strconv.Itoa(i) + `","cost":1}`)
	}
	return bodies
}

// newServeLoop returns a function that serves the i-th body (of
// checkBodies, in turn) through h.ServeHTTP, reusing one request and one
// response writer, and fails tb unless the check was allowed.
func newServeLoop(tb testing.TB, h http.Handler, auth string) func(int) {
	bodies := checkBodies()
	var rd bytes.Reader
	req, err := http.NewRequest("POST", "/v1/allow", nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	body := io.NopCloser(&rd)
	w := &reusedWriter{h: http.Header{}}
	return func(i int) {
		rd.Reset(bodies[i%len(bodies)])
		req.Body = body
		w.reset()
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK || !bytes.Contains(w.body, []byte(`"allowed":true`)) {
			tb.Fatalf("status %d: %s", w.status, w.body)
		}
	}
}

// reusedWriter is a ResponseWriter reset between requests.
type reusedWriter struct {
	h      http.Header
	status int
	body   []byte
}

func (w *reusedWriter) Header() http.Header { return w.h }
func (w *reusedWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
func (w *reusedWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}
func (w *reusedWriter) reset() { clear(w.h); w.status = 0; w.body = w.body[:0] }

// newHTTPLoop serves h on a loopback listener with the daemon's server
// limits and returns a function that sends it the i-th body (in turn)
// over one keep-alive connection, with the headers cmd/loadtest sends, and
// fails tb unless the answer is 200.
func newHTTPLoop(tb testing.TB, h http.Handler, auth string) func(int) {
	bodies := checkBodies()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes}
	go srv.Serve(ln)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(); srv.Close() })
	// A hand-written client, so that the client's own allocations are few
	// and the same for every server.
	br := bufio.NewReader(conn)
	head := "POST /v1/allow HTTP/1.1\r\nHost: bench\r\nUser-Agent: Go-http-client/1.1\r\nContent-Type: application/json\r\n"
	if auth != "" {
		head += "Authorization: " + auth + "\r\n"
	}
	var req []byte
	var status []byte
	return func(i int) {
		body := bodies[i%len(bodies)]
		req = append(req[:0], head...)
		req = append(req, "Content-Length: "...)
		req = strconv.AppendInt(req, int64(len(body)), 10)
		req = append(req, "\r\n\r\n"...)
		req = append(req, body...)
		if _, err := conn.Write(req); err != nil {
			tb.Fatal(err)
		}
		length := -1
		for first := true; ; first = false {
			line, err := br.ReadSlice('\n')
			if err != nil {
				tb.Fatal(err)
			}
			if first {
				status = append(status[:0], line...)
				continue
			}
			if len(line) <= 2 {
				break
			}
			if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
				length, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
			}
		}
		if length < 0 || !bytes.HasPrefix(status, []byte("HTTP/1.1 200")) {
			tb.Fatalf("answer %q without Content-Length", status)
		}
		if _, err := br.Discard(length); err != nil {
			tb.Fatal(err)
		}
	}
}

// benchDaemonHandler starts the daemon on embedded defaults (in-process
// store, embedded NATS, ledger reporter and gossip as usage sinks) with a
// check token, plan as its default plan and, when traced, tracing to an
// OTLP collector of the test's own, and returns the handler its
// http.Server serves.
func benchDaemonHandler(tb testing.TB, plan string, traced bool) http.Handler {
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	o.Listen = "127.0.0.1:0"
	o.DataDir = tb.TempDir()
	o.AdminToken = adminToken
	o.CheckToken = benchCheckToken
	o.ControlPlane = true
	o.LogLevel = "warn"
	o.ShutdownDelay = 0
	if traced {
		o.OTLPEndpoint = testserver.StartOTLPCollector(tb).URL
	}
	var srv *httpServer
	app := fx.New(appOptions(o, io.Discard), fx.Populate(&srv), fx.NopLogger)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		tb.Fatalf("start daemon: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Stop(ctx)
	})
	h := srv.srv.Handler
	req, _ := http.NewRequest("PUT", "/v1/limits/default", strings.NewReader(plan))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	w := &reusedWriter{h: http.Header{}}
	h.ServeHTTP(w, req)
	if w.status != http.StatusNoContent {
		tb.Fatalf("set the default plan: %d %s", w.status, w.body)
	}
	return h
}

// TestCheckAllocationBudget (make bench-budget): on both plans, the daemon
// with tracing off and on allocates per check at most allocBudget times
// the bare handler's bytes and allocations in the same run, served in
// process and over loopback. It runs only with QUOTA_ALLOC_BUDGET=1 (make
// bench-budget sets it), without the race detector, under which sync.Pool
// drops what it holds at random.
func TestCheckAllocationBudget(t *testing.T) {
	if os.Getenv("QUOTA_ALLOC_BUDGET") != "1" {
		t.Skip("set QUOTA_ALLOC_BUDGET=1 (make bench-budget)")
	}
	for _, plan := range checkPlans {
		for _, d := range checkDaemons {
			t.Run(plan.name+"/"+d.name, func(t *testing.T) {
				h := benchDaemonHandler(t, plan.body, d.traced)
				for _, loop := range checkLoops {
					bare := loop.new(t, baseline.CheckHandler(), "")
					daemon := loop.new(t, h, "Bearer "+benchCheckToken)
					warm(bare)
					warm(daemon)
					b, got := measureBeside(bare, daemon)
					rb, ra := got.bytes/b.bytes, got.allocs/b.allocs
					t.Logf("%s: %.0f B, %.1f allocs per check; bare %.0f B, %.1f allocs: %.2fx, %.2fx",
						loop.name, got.bytes, got.allocs, b.bytes, b.allocs, rb, ra)
					if rb > allocBudget || ra > allocBudget {
						t.Errorf("%s: %.2fx the bare handler's bytes and %.2fx its allocations per check, budget %.1fx",
							loop.name, rb, ra, allocBudget)
					}
				}
			})
		}
	}
}
