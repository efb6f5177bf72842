package reconcile

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// ProcessBatch runs the batch path on msgs as Run does for every gathered
// batch: check, dead-letter and terminate, write (splitting on a refusal),
// acknowledge. It returns an error only when ctx ends.
func (r *Reconciler) ProcessBatch(ctx context.Context, msgs []jetstream.Msg) error {
	batch := make([]gathered, len(msgs))
	for i, m := range msgs {
		batch[i] = r.decode(m, r.cfg.Clock.Now())
	}
	return r.process(ctx, batch)
}
