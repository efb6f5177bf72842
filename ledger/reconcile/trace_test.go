package reconcile_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// A gathered batch is a span, and its transaction a child span that says
// how many rows it inserted.
func TestReconcilerTracesBatches(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	publish(t, js, "", rep("a", "p1", 1, 3, 3, false), rep("b", "p1", 1, 4, 4, false), rep("c", "p1", 1, 5, 5, true))
	x := startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) { c.Tracer = tp.Tracer("test") })
	waitSpent(t, pool, map[string]int64{"a": 3, "b": 4, "c": 5}, 10*time.Second)
	x.stop(t)

	inserted, batches := int64(0), 0
	for _, s := range sr.Ended() {
		attrs := map[string]int64{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.AsInt64()
		}
		switch s.Name() {
		case "quota.reconcile.batch":
			batches++
		case "quota.reconcile.write":
			inserted += attrs["quota.rows_inserted"]
			if !s.Parent().IsValid() {
				t.Errorf("write span without a parent batch span")
			}
		default:
			t.Errorf("unexpected span %q", s.Name())
		}
	}
	if batches == 0 || inserted != 3 {
		t.Fatalf("%d batch spans, %d rows inserted in write spans; want at least one batch and 3 rows", batches, inserted)
	}
}
