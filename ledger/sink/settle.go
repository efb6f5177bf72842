package sink

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotHeld: SettleHeld found no held event with that id for the sink.
var ErrNotHeld = errors.New("sink: no held event with that id")

// SettleHeld records a person's finding about a held event (one
// unacknowledged past the sink's dedupe window), after checking the
// sink's own records (Stripe: the customer's meter event summaries for
// the period). delivered: the sink holds it; it is recorded acknowledged.
// Not delivered: it is recorded failed with its first attempt now, so the
// next run sends it again with its recorded payload and identifier (the
// sink has forgotten it, so it bills it once), however old its period, and
// re-stamped if its invoice was finalized meanwhile (Restamper).
func SettleHeld(ctx context.Context, db Execer, sinkName, eventID string, delivered bool, now time.Time) error {
	q := `UPDATE billing_sink_events SET status = 'failed', first_attempt_at = $3, maybe_stored = false, updated_at = now()
WHERE sink = $1 AND event_id = $2 AND status = 'held'`
	if delivered {
		q = `UPDATE billing_sink_events SET status = 'sent', acked_billed = billed, sent_at = $3, last_error = NULL,
    updated_at = now()
WHERE sink = $1 AND event_id = $2 AND status = 'held'`
	}
	tag, err := db.Exec(ctx, q, sinkName, eventID, now)
	if err != nil {
		return fmt.Errorf("sink: settle held event: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: sink %q, event %q", ErrNotHeld, sinkName, eventID)
	}
	return nil
}
