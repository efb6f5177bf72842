// Package tracing sets up OpenTelemetry tracing for the daemons: spans go
// over OTLP/HTTP to a collector when an endpoint is configured, and nowhere
// (a no-op tracer, no cost) otherwise. Incoming W3C trace context
// (traceparent) is read with Propagator.
//
// The libraries (region, ledger, ledger/reconcile, catalog) each take a
// trace.Tracer in their Config and trace only their slow work: store
// calls, catalogue writes and pushes, report publishing, reconciler
// batches; never a decision served from a lease.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Propagator reads and writes W3C trace context and baggage headers.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Config configures Setup.
type Config struct {
	// Endpoint is the OTLP/HTTP collector: a URL (http:// or https://,
	// path default /v1/traces). Empty: tracing is off.
	Endpoint string
	// Service is the service.name resource attribute, e.g.
	// "quota-regional-limiter".
	Service string
	// Attributes are added to the resource (region, process).
	Attributes map[string]string
	// SampleRatio is the share of new traces sampled, in [0, 1]; a span
	// whose parent was sampled (incoming traceparent) is always sampled.
	// Default 1 when Endpoint is set.
	SampleRatio float64
	// CallerTraceOnly names instrumentation scopes (tracer names) whose
	// spans are started only inside a sampled trace that ctx already
	// carries, such as a caller's traceparent: work done per request (a
	// store call of a check) is traced for the callers that trace it, not
	// as a new trace for every request. Other scopes start traces of their
	// own (SampleRatio).
	CallerTraceOnly []string
}

// CheckEndpoint returns an error when endpoint, not empty, is not an
// http:// or https:// URL with a host.
func CheckEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("otlp endpoint %q: want an http:// or https:// URL", endpoint)
	}
	return nil
}

// Setup returns the tracer provider for cfg and a shutdown that flushes
// the spans still buffered (bounded by its context). With no Endpoint it
// returns a nil provider: the libraries take a nil tracer as "no spans",
// which skips even building a span's options on the slow path.
func Setup(cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	if cfg.Endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	if err := CheckEndpoint(cfg.Endpoint); err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	u, _ := url.Parse(cfg.Endpoint)
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, nil, fmt.Errorf("tracing: sample ratio %v not in [0, 1]", cfg.SampleRatio)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithTimeout(5 * time.Second)}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		opts = append(opts, otlptracehttp.WithURLPath(p))
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.Service)}
	for k, v := range cfg.Attributes {
		attrs = append(attrs, attribute.String(k, v))
	}
	ratio := cfg.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	shutdown := func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("tracing: flush spans: %w", err)
		}
		return nil
	}
	if len(cfg.CallerTraceOnly) > 0 {
		return callerTraceOnly{tp, slices.Clone(cfg.CallerTraceOnly)}, shutdown, nil
	}
	return tp, shutdown, nil
}

// Handler passes the W3C trace context of a request that carries one
// (traceparent) to next in the request's context, so that spans the
// request causes (a store call on the slow path) join the caller's trace.
// A request without the header goes through untouched.
func Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") == "" {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r.WithContext(Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))))
	})
}
