package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Spans reach an OTLP/HTTP collector (here a server that decodes what the
// real exporter sends) with the service name, and Setup refuses an
// endpoint that is not an http(s) URL.
func TestSetupExportsOverOTLP(t *testing.T) {
	var mu sync.Mutex
	var got []string
	var service string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					got = append(got, s.Name)
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	defer srv.Close()

	tp, shutdown, err := Setup(Config{Endpoint: srv.URL, Service: "quota-test"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "quota.test.span")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "quota.test.span" || service != "quota-test" {
		t.Fatalf("collector got spans %v from service %q", got, service)
	}
}

func TestSetupRefusesBadEndpoints(t *testing.T) {
	for _, ep := range []string{"collector:4318", "ftp://x", "http://", "::"} {
		if _, _, err := Setup(Config{Endpoint: ep}); err == nil || !strings.Contains(err.Error(), "otlp endpoint") {
			t.Errorf("Setup(%q) = %v, want an error naming the otlp endpoint", ep, err)
		}
	}
	if _, _, err := Setup(Config{Endpoint: "http://x:4318", SampleRatio: 2}); err == nil {
		t.Error("Setup accepted a sample ratio of 2")
	}
	tp, shutdown, err := Setup(Config{})
	if err != nil || tp != nil || shutdown(context.Background()) != nil {
		t.Fatalf("Setup(off) = %v, %v; want no provider", tp, err)
	}
}

// A request's traceparent becomes the parent of the spans its handler
// starts; a request without one starts a trace of its own.
func TestHandlerHonoursTraceparent(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	var got trace.SpanContext
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, span := tp.Tracer("test").Start(r.Context(), "quota.store.call")
		got = span.SpanContext()
		span.End()
	}))
	req := httptest.NewRequest("POST", "/v1/allow", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("span trace %s, want the caller's", got.TraceID())
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/allow", nil))
	if got.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" || !got.TraceID().IsValid() {
		t.Fatalf("a request without traceparent got trace %s", got.TraceID())
	}
}
