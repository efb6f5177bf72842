package catalog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/limit"
)

// A write is a span with its kind and revision, and the push that applies
// it is another; neither names the key.
func TestWritesAndPushesAreTraced(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	srv := testserver.StartNATS(t)
	cfg := catalog.DefaultConfig()
	cfg.RetryInterval = 50 * time.Millisecond
	cfg.Tracer = tp.Tracer("test")
	c, err := catalog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(connect(t, srv.URL)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	waitSynced(t, c)
	ctx := context.Background()
	if _, err := c.PutPlan(ctx, "test", "gold", limit.Plan{Rate: 10, Capacity: 20}); err != nil {
		t.Fatal(err)
	}
	rev, err := c.Assign(ctx, "test", "acct_secretive", "gold")
	if err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		writes, pushes := 0, 0
		var last int64
		for _, s := range sr.Ended() {
			for _, kv := range s.Attributes() {
				if kv.Value.AsString() == "acct_secretive" {
					t.Fatalf("span %s records the key", s.Name())
				}
				if s.Name() == "quota.catalog.write" && kv.Key == "quota.revision" {
					last = kv.Value.AsInt64()
				}
			}
			switch s.Name() {
			case "quota.catalog.write":
				writes++
			case "quota.catalog.push":
				pushes++
			}
		}
		if writes != 2 || pushes < 2 || last != int64(rev) {
			return errors.New("want 2 write spans (the last at the key's revision) and a push span for each")
		}
		return nil
	})
}
