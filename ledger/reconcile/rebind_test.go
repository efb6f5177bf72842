package reconcile_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// heldJS lets the first consumer creation through and holds back the
// following ones (they fail) until released, so that a test can see the
// reconciler between losing its consumer and binding it again.
type heldJS struct {
	jetstream.JetStream
	creates  atomic.Int32
	released atomic.Bool
}

func (h *heldJS) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if h.creates.Add(1) > 1 && !h.released.Load() {
		return nil, errors.New("test: consumer creation held")
	}
	return h.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
}

func TestConsumerDeletedUnderRunningReconciler(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	held := &heldJS{JetStream: js}
	x := startReconciler(t, held, reconcile.NewWriter(pool), nil)
	publish(t, js, "", rep("before", "p1", 1, 2, 2, true))
	waitSpent(t, pool, map[string]int64{"before": 2}, 10*time.Second)
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, x.r.Ready)

	ctx := context.Background()
	if err := js.DeleteConsumer(ctx, ledger.DefaultStream, "reconciler"); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if x.r.Ready() == nil {
			return errors.New("still ready without a consumer")
		}
		return nil
	})
	publish(t, js, "", rep("after", "p1", 1, 5, 5, true))

	held.released.Store(true)
	waitSpent(t, pool, map[string]int64{"before": 2, "after": 5}, 20*time.Second)
	testserver.WaitFor(t, 10*time.Second, 5*time.Millisecond, x.r.Ready)
	if n := val(x.m.Rebinds); n < 1 {
		t.Fatalf("consumer_rebinds_total = %v, want at least 1", n)
	}
	if _, err := js.Consumer(ctx, ledger.DefaultStream, "reconciler"); err != nil {
		t.Fatalf("durable consumer not recreated: %v", err)
	}
}
