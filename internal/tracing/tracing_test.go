package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/internal/testserver"
)

// Spans reach an OTLP/HTTP collector (here a server that decodes what the
// real exporter sends) with the service name, and Setup refuses an
// endpoint that is not an http(s) URL.
func TestSetupExportsOverOTLP(t *testing.T) {
	col := testserver.StartOTLPCollector(t)
	tp, shutdown, err := Setup(Config{Endpoint: col.URL, Service: "quota-test"})
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
	if got := col.Spans(); len(got) != 1 || got[0].Name != "quota.test.span" || got[0].Service != "quota-test" {
		t.Fatalf("collector got %+v", got)
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

// A tracer of a CallerTraceOnly scope records spans only inside a sampled
// trace, and an untraced Start allocates nothing (the options a caller
// passes are its own); other scopes still start traces of their own.
func TestCallerTraceOnly(t *testing.T) {
	col := testserver.StartOTLPCollector(t)
	const scope = "github.com/quotaplatform/quota/region"
	tp, shutdown, err := Setup(Config{Endpoint: col.URL, Service: "quota-test", CallerTraceOnly: []string{scope}})
	if err != nil {
		t.Fatal(err)
	}
	store, other := tp.Tracer(scope), tp.Tracer("github.com/quotaplatform/quota/ledger")

	_, span := store.Start(context.Background(), "quota.store.untraced")
	span.End()
	untraced := context.Background()
	if a := testing.AllocsPerRun(100, func() {
		_, s := store.Start(untraced, "quota.store.untraced")
		s.End()
	}); a != 0 {
		t.Errorf("an untraced store span allocates %v times, want 0", a)
	}
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9}, SpanID: trace.SpanID{0x01}, TraceFlags: trace.FlagsSampled, Remote: true}))
	_, span = store.Start(parent, "quota.store.traced")
	span.End()
	unsampled := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xfa}, SpanID: trace.SpanID{0x02}, Remote: true}))
	_, span = store.Start(unsampled, "quota.store.unsampled")
	span.End()
	_, span = other.Start(context.Background(), "quota.ledger.flush")
	span.End()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range col.Spans() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if want := []string{"quota.ledger.flush", "quota.store.traced"}; !slices.Equal(names, want) {
		t.Fatalf("collector got spans %v, want %v", names, want)
	}
}
