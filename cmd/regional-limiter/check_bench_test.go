package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/baseline"
)

// The single check path, end to end, against a bare net/http handler that
// decodes the same JSON (the baseline make loadtest runs beside the daemon):
//
//	go test -run '^$' -bench 'Check' -benchmem ./cmd/regional-limiter/
//
// BenchmarkCheck calls each handler's ServeHTTP with one reused request
// and response writer, so B/op and allocs/op are the handler's own: for
// the daemon, the whole handler its http.Server serves (HTTP metrics,
// drain check, mux, token guard, decode, decision with usage recording,
// check metrics, headers, encode), on embedded defaults. BenchmarkCheckHTTP
// sends the checks over a loopback keep-alive connection, so its B/op
// holds net/http's server (and this client's) allocations too: the
// difference between its two sub-benchmarks is the daemon's.

// checkKeys is the number of distinct keys the benchmarks cycle through,
// as make loadtest does.
const checkKeys = 10000

func BenchmarkCheck(b *testing.B) {
	bodies := checkBodies()
	b.Run("daemon", func(b *testing.B) { benchServe(b, benchDaemonHandler(b), bodies) })
	b.Run("bare", func(b *testing.B) { benchServe(b, baseline.CheckHandler(), bodies) })
}

func BenchmarkCheckHTTP(b *testing.B) {
	bodies := checkBodies()
	b.Run("daemon", func(b *testing.B) { benchHTTP(b, benchDaemonHandler(b), bodies) })
	b.Run("bare", func(b *testing.B) { benchHTTP(b, baseline.CheckHandler(), bodies) })
}

func checkBodies() [][]byte {
	bodies := make([][]byte, checkKeys)
	for i := range bodies {
		bodies[i] = []byte(`{"key":"lt_` + strconv.Itoa(i) + `","cost":1}`)
	}
	return bodies
}

// benchServe serves the bodies in turn through h.ServeHTTP, reusing one
// request and one response writer.
func benchServe(b *testing.B, h http.Handler, bodies [][]byte) {
	var rd bytes.Reader
	req, err := http.NewRequest("POST", "/v1/allow", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	body := io.NopCloser(&rd)
	w := &reusedWriter{h: http.Header{}}
	serve := func(i int) {
		rd.Reset(bodies[i%len(bodies)])
		req.Body = body
		w.reset()
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK || !bytes.Contains(w.body, []byte(`"allowed":true`)) {
			b.Fatalf("status %d: %s", w.status, w.body)
		}
	}
	for i := range bodies { // every key's state exists, as at steady state
		serve(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		serve(i)
		i++
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

// benchHTTP serves h on a loopback listener and sends it the bodies in
// turn over one keep-alive connection, with the headers cmd/loadtest sends.
func benchHTTP(b *testing.B, h http.Handler, bodies [][]byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	// A hand-written client, so that the client's own allocations are few
	// and the same for both handlers.
	br := bufio.NewReader(conn)
	var req []byte
	var status []byte
	send := func(i int) {
		body := bodies[i%len(bodies)]
		req = append(req[:0], "POST /v1/allow HTTP/1.1\r\nHost: bench\r\nUser-Agent: Go-http-client/1.1\r\nContent-Type: application/json\r\nContent-Length: "...)
		req = strconv.AppendInt(req, int64(len(body)), 10)
		req = append(req, "\r\n\r\n"...)
		req = append(req, body...)
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		length := -1
		for first := true; ; first = false {
			line, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
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
			b.Fatalf("answer %q without Content-Length", status)
		}
		if _, err := br.Discard(length); err != nil {
			b.Fatal(err)
		}
	}
	for i := range bodies {
		send(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		send(i)
		i++
	}
}

// benchDaemonHandler starts the daemon on embedded defaults (in-process
// store, embedded NATS, ledger reporter and gossip as usage sinks) with a
// default plan no benchmark exhausts, and returns the handler its
// http.Server serves.
func benchDaemonHandler(b *testing.B) http.Handler {
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	o.Listen = "127.0.0.1:0"
	o.DataDir = b.TempDir()
	o.AdminToken = adminToken
	o.ControlPlane = true
	o.LogLevel = "warn"
	o.ShutdownDelay = 0
	var srv *httpServer
	app := fx.New(appOptions(o, io.Discard), fx.Populate(&srv), fx.NopLogger)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		b.Fatalf("start daemon: %v", err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Stop(ctx)
	})
	h := srv.srv.Handler
	req, _ := http.NewRequest("PUT", "/v1/limits/default", strings.NewReader(`{"rate":1e9,"capacity":1e9}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	w := &reusedWriter{h: http.Header{}}
	h.ServeHTTP(w, req)
	if w.status != http.StatusNoContent {
		b.Fatalf("set the default plan: %d %s", w.status, w.body)
	}
	return h
}
