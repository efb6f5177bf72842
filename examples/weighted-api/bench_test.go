package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/participant"
)

// What the limit costs a request of this service, in one run:
//
//	go test -run '^$' -bench Quote -benchmem ./examples/weighted-api/
//
// Each sub-benchmark serves GET /v1/quotes/{symbol} through the service's
// own mux (newAPIMux), calling ServeHTTP with one reused request and
// response writer, so that ns/op and allocs/op are the service's handler
// with its limit and nothing of net/http's server:
//
//   - bare: no limit.
//   - participant: the participant's middleware, deciding in process.
//   - daemon-http: a middleware that asks the daemon's check API
//     (POST /v1/allow with the key and the endpoint) over a loopback
//     keep-alive connection, as a service that cannot embed the limiter
//     does. The check API is limitapi's handler, the daemon's, served by an
//     httptest server on a second participant; its allocations are in this
//     process and so in allocs/op.
//
// Every decision is allowed: the default plan is far above what a run
// spends. p99-ns is the 99th percentile of every 8th request's latency.

// benchKeys is the number of distinct keys the benchmarks cycle through;
// warmRounds is how many requests each key gets before the clock starts,
// so that leases have grown (doubling from 1 permit) and decisions are on
// the fast path, as at steady state.
const (
	benchKeys  = 256
	warmRounds = 32
)

func BenchmarkQuote(b *testing.B) {
	local := benchParticipant(b)
	limit, err := local.Middleware(httplimit.Config{Endpoint: endpointOf})
	if err != nil {
		b.Fatal(err)
	}
	daemon := httptest.NewServer(checkAPI(b, benchParticipant(b)))
	b.Cleanup(daemon.Close)
	remote := &remoteLimit{url: daemon.URL + "/v1/allow", client: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
		Timeout:   2 * time.Second,
	}}
	b.Cleanup(remote.client.CloseIdleConnections)

	for _, v := range []struct {
		name  string
		limit func(http.Handler) http.Handler
	}{
		{"bare", func(h http.Handler) http.Handler { return h }},
		{"participant", limit},
		{"daemon-http", remote.middleware},
	} {
		h := newAPIMux(v.limit)
		b.Run(v.name, func(b *testing.B) { benchServe(b, h) })
		b.Run(v.name+"/parallel", func(b *testing.B) { benchServeParallel(b, h) })
	}
}

// benchParticipant opens a participant on embedded defaults with a default
// plan no benchmark exhausts.
func benchParticipant(b *testing.B) *participant.Participant {
	b.Helper()
	o := participant.DefaultOptions()
	o.DataDir = b.TempDir()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.DefaultPlan.Rate, o.DefaultPlan.Capacity = 1e9, 1e9
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := participant.Open(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

// checkAPI is the daemon's check API (limitapi) on p.
func checkAPI(b *testing.B, p *participant.Participant) http.Handler {
	b.Helper()
	cfg := limitapi.DefaultConfig()
	cfg.Limiter, cfg.Catalog, cfg.Shares = p.Limiter(), p.Catalog(), p.Gossip()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	api, err := limitapi.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return api.Mux(api.Routes())
}

// remoteLimit is the middleware of a service that asks the daemon: one
// POST /v1/allow per request, 429 when the daemon says no.
type remoteLimit struct {
	url    string
	client *http.Client
}

type remoteCheck struct {
	Key      string `json:"key"`
	Endpoint string `json:"endpoint"`
}

type remoteDecision struct {
	Allowed      bool  `json:"allowed"`
	RetryAfterMS int64 `json:"retry_after_ms"`
}

func (l *remoteLimit) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := json.Marshal(remoteCheck{Key: r.Header.Get(httplimit.KeyHeader), Endpoint: endpointOf(r)})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), "POST", l.url, bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := l.client.Do(req)
		if err != nil {
			http.Error(w, "limiter unreachable", http.StatusServiceUnavailable)
			return
		}
		var d remoteDecision
		err = json.NewDecoder(resp.Body).Decode(&d)
		io.Copy(io.Discard, resp.Body) // so that the connection is reused
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			http.Error(w, "limiter answered "+resp.Status, http.StatusBadGateway)
			return
		}
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.FormatInt((d.RetryAfterMS+999)/1000, 10))
			http.Error(w, "rate limited", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// quoteRequests are GET /v1/quotes/ACME requests, one per key, routed by a
// ServeMux as a server would (the pattern is set by the mux itself).
func quoteRequests(b *testing.B) []*http.Request {
	reqs := make([]*http.Request, benchKeys)
	for i := range reqs {
		req, err := http.NewRequest("GET", "/v1/quotes/ACME", nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set(httplimit.KeyHeader, "bench_"+strconv.Itoa(i))
		reqs[i] = req
	}
	return reqs
}

// benchServe serves the requests in turn through h, reusing one response
// writer, after warmRounds rounds over every key.
func benchServe(b *testing.B, h http.Handler) {
	reqs := quoteRequests(b)
	w := &reusedWriter{h: http.Header{}}
	serve := func(i int) {
		w.reset()
		h.ServeHTTP(w, reqs[i%len(reqs)])
		if w.status != http.StatusOK {
			b.Fatalf("status %d: %s", w.status, w.body)
		}
	}
	for i := range warmRounds * len(reqs) {
		serve(i)
	}
	samples := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%8 == 0 && len(samples) < cap(samples) {
			t0 := time.Now()
			serve(i)
			samples = append(samples, time.Since(t0))
		} else {
			serve(i)
		}
		i++
	}
	if len(samples) > 0 {
		slices.Sort(samples)
		b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
	}
}

// benchServeParallel is benchServe on every P. Each goroutine has its own
// requests: the mux writes the matched pattern into a request.
func benchServeParallel(b *testing.B, h http.Handler) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		reqs := quoteRequests(b)
		w := &reusedWriter{h: http.Header{}}
		i := 0
		for pb.Next() {
			w.reset()
			h.ServeHTTP(w, reqs[i%len(reqs)])
			if w.status != http.StatusOK {
				b.Errorf("status %d: %s", w.status, w.body)
				return
			}
			i++
		}
	})
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
