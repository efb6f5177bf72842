package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace endpoint that keeps each span's name and
// trace ID.
type collector struct {
	mu    sync.Mutex
	spans map[string][]string // name → trace IDs
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans[s.Name] = append(c.spans[s.Name], hex.EncodeToString(s.TraceId))
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// TestDaemonTraces: with --otlp-endpoint, a check that takes the slow path
// sends its store call's span in the caller's trace (traceparent), a
// control-plane write and its push are spans, and the final report flush
// is one; every span reaches the collector by the time the daemon stopped.
func TestDaemonTraces(t *testing.T) {
	col := &collector{spans: map[string][]string{}}
	srv := httptest.NewServer(col)
	defer srv.Close()
	o := testOptions(t, "", "", t.TempDir())
	o.OTLPEndpoint = srv.URL
	d := startDaemon(t, o)
	d.mustCall(t, "PUT", "/v1/limits/gold", `{"rate":10,"capacity":20}`, true, 204)

	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("POST", d.base+"/v1/allow", strings.NewReader(`{"key":"acct_traced","cost":1}`))
	req.Header.Set("traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %s", resp.Status)
	}
	d.stop(t) // flushes the final reports, then the spans

	col.mu.Lock()
	defer col.mu.Unlock()
	inTrace := false
	for _, id := range col.spans["quota.store.call"] {
		inTrace = inTrace || id == trace
	}
	if !inTrace {
		t.Errorf("no quota.store.call span in the caller's trace: %v", col.spans)
	}
	for _, name := range []string{"quota.catalog.write", "quota.catalog.push", "quota.ledger.flush"} {
		if len(col.spans[name]) == 0 {
			t.Errorf("no %s span reached the collector: %v", name, col.spans)
		}
	}
}
