package limitapi_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/region"
)

// BenchmarkAllow serves single checks of 1,024 keys through the API's
// ServeHTTP with one reused request and response writer, so that B/op and
// allocs/op are the check path's own (decode, decision, headers, encode).
// cmd/regional-limiter's BenchmarkCheck adds the daemon's middleware.
func BenchmarkAllow(b *testing.B) {
	h, cat := newAPI(b, true)
	cat.plans["default"] = region.Plan{Rate: 1e9, Capacity: 1e9}
	benchChecks(b, h, "")
}

// benchChecks serves single checks of 1,024 keys in turn through h,
// with "Authorization: Bearer <tok>" unless tok is "".
func benchChecks(b *testing.B, h http.Handler, tok string) {
	serve := checkServer(b, h, tok)
	for i := range 1024 { // every key's state exists, as at steady state
		serve(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		serve(i)
		i++
	}
}

// checkServer returns a function that serves one single check of key
// acct_<i%1024> through h, reusing one request and one response writer,
// and fails tb unless it is allowed.
func checkServer(tb testing.TB, h http.Handler, tok string) func(i int) {
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = []byte(`{"key":"acct_` + strconv.Itoa(i) + `","cost":1}`)
	}
	var rd bytes.Reader
	body := io.NopCloser(&rd)
	r := httptest.NewRequest("POST", "/v1/allow", nil)
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	w := &reusedWriter{h: http.Header{}}
	return func(i int) {
		rd.Reset(bodies[i%len(bodies)])
		r.Body = body
		clear(w.h)
		w.status, w.body = 0, w.body[:0]
		h.ServeHTTP(w, r)
		if w.status != http.StatusOK || !bytes.Contains(w.body, []byte(`"allowed":true`)) {
			tb.Fatalf("status %d: %s", w.status, w.body)
		}
	}
}

// reusedWriter is a ResponseWriter the benchmarks reset between requests.
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

// A single check allocates its key and its rate-limit header values
// (httplimit.WriteHeaders: two allocations), and nothing else.
func TestAllowAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h, cat := newAPI(t, true)
	cat.plans["default"] = region.Plan{Rate: 1e9, Capacity: 1e9}
	serve := checkServer(t, h, "")
	for i := range 64 * 1024 { // leases grown: no store call below
		serve(i)
	}
	i := 0
	if n := testing.AllocsPerRun(5000, func() { serve(i); i++ }); n > 3.1 {
		t.Errorf("%.2f allocations per check, want at most 3", n)
	}
}

func BenchmarkAllowBatch100(b *testing.B) {
	h, cat := newAPI(b, true)
	cat.plans["default"] = region.Plan{Rate: 1e9, Capacity: 1e9}
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"key":"acct_%d","cost":1}`, i)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/allow/batch", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkAllowCheckToken is BenchmarkAllow behind a check token (two
// configured, the second presented): the token check hashes and compares.
func BenchmarkAllowCheckToken(b *testing.B) {
	h, cat, _ := newAPIWithConfig(b, true, nil, withTokens)
	cat.plans["default"] = region.Plan{Rate: 1e9, Capacity: 1e9}
	benchChecks(b, h, checkNew)
}
