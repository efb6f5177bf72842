package region_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// A store call is a span, a child of the decision's context; a decision
// served from the lease makes none.
func TestStoreCallsAreTraced(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	cfg := region.DefaultConfig()
	cfg.Tracer = tp.Tracer("test")
	lim, err := region.New(memstore.New(nil), region.StaticPlans{Default: region.Plan{Rate: 100, Capacity: 100}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "check request")
	const decisions = 50 // a cold key's leases start small and grow: a few calls, then the lease
	for range decisions {
		if d, err := lim.Allow(ctx, "acct_1", 1); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
	}
	parent.End()
	var calls []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "quota.store.call" {
			calls = append(calls, s)
		}
	}
	storeCalls := lim.Stats().StoreCalls
	if int64(len(calls)) != storeCalls || storeCalls == 0 || storeCalls >= decisions/2 {
		t.Fatalf("%d store-call spans, %d store calls for %d decisions: want one span per call, and most decisions from the lease",
			len(calls), storeCalls, decisions)
	}
	for _, c := range calls {
		if c.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Fatal("a store-call span is not a child of the request's span")
		}
		for _, kv := range c.Attributes() {
			if kv.Value.AsString() == "acct_1" {
				t.Fatalf("the span records the key (%s)", kv.Key)
			}
		}
	}
}

// BenchmarkFastPathTraced: with a tracer configured, a decision from the
// lease costs what it costs without one (compare BenchmarkFastPath's
// quota/serial in the same run): only store calls are traced.
func BenchmarkFastPathTraced(b *testing.B) {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider()
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, traced := range []bool{false, true} {
		name := "untraced"
		if traced {
			name = "traced"
		}
		b.Run(name, func(b *testing.B) {
			cfg := region.DefaultConfig()
			if traced {
				cfg.Tracer = tp.Tracer("bench")
			}
			lim, err := region.New(memstore.New(nil), region.StaticPlans{Default: benchPlan}, cfg)
			if err != nil {
				b.Fatal(err)
			}
			lim.Allow(ctx, "hot", 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d, _ := lim.Allow(ctx, "hot", 1); !d.Allowed {
					b.Fatal("rejected")
				}
			}
		})
	}
}
