package testserver

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// CollectedSpan is one span an OTLPCollector received.
type CollectedSpan struct {
	Name    string
	TraceID string // hex
	Service string // the resource's service.name
}

// OTLPCollector is an OTLP/HTTP trace endpoint (POST /v1/traces,
// protobuf) that keeps every span it receives, for tests of the real
// exporter. It stops when the test ends.
type OTLPCollector struct {
	URL   string
	mu    sync.Mutex
	spans []CollectedSpan
}

// StartOTLPCollector starts a collector on a free loopback port.
func StartOTLPCollector(t testing.TB) *OTLPCollector {
	c := &OTLPCollector{}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

func (c *OTLPCollector) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, CollectedSpan{Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), Service: service})
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// Spans returns the spans received so far.
func (c *OTLPCollector) Spans() []CollectedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]CollectedSpan(nil), c.spans...)
}
