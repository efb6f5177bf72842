-- Sink events are recorded before they are sent (issue 27): a row is
-- 'pending' from the moment its event may have reached the sink until the
-- sink's answer is recorded, so an identifier is never sent with two
-- payloads. frame holds a sink's exact request beyond the event's data (a
-- Stripe meter event's customer, value, timestamp and identifier), decided
-- at the first attempt and re-sent unchanged. first_attempt_at is when the
-- current event was first sent: past the sink's deduplication window
-- (Stripe: 24 h) an unacknowledged event is 'held' for a person instead of
-- being re-sent blindly. 'hour' periods are the slices continuous runs
-- send.
ALTER TABLE billing_sink_events
    DROP CONSTRAINT billing_sink_events_status_check,
    ADD CONSTRAINT billing_sink_events_status_check CHECK (status IN ('pending', 'sent', 'failed', 'held')),
    DROP CONSTRAINT billing_sink_events_granularity_check,
    ADD CONSTRAINT billing_sink_events_granularity_check CHECK (granularity IN ('hour', 'day', 'month')),
    ADD COLUMN frame jsonb,
    ADD COLUMN first_attempt_at timestamptz;

COMMENT ON COLUMN billing_sink_events.frame IS 'The sink request decided at the first attempt (Stripe: customer, value, timestamp, identifier); re-sent unchanged.';
COMMENT ON COLUMN billing_sink_events.first_attempt_at IS 'First attempt of the current event_id; an unacknowledged event older than the sink''s dedupe window is held.';

-- A database rolled back past this migration kept what its down part
-- could not leave in billing_sink_events (billing_sink_events_010_kept):
-- put it back, so that nothing already sent is sent again. Hour rows come
-- back whole; a day or month row gets its status, frame and first attempt
-- back only when nothing touched it while rolled back.
DO $$
BEGIN
    IF to_regclass('billing_sink_events_010_kept') IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision, event_id, spent,
                                     rejected, degraded, acked_spent, data, status, attempts, last_error, sent_at,
                                     updated_at, frame, first_attempt_at)
    SELECT sink, key, period_start, granularity, period_end, revision, event_id, spent,
           rejected, degraded, acked_spent, data, status, attempts, last_error, sent_at,
           updated_at, frame, first_attempt_at
    FROM billing_sink_events_010_kept WHERE granularity = 'hour'
    ON CONFLICT DO NOTHING;
    UPDATE billing_sink_events e
    SET status = k.status, frame = k.frame, first_attempt_at = k.first_attempt_at
    FROM billing_sink_events_010_kept k
    WHERE k.granularity <> 'hour'
      AND (e.sink, e.key, e.period_start, e.granularity) = (k.sink, k.key, k.period_start, k.granularity)
      AND e.event_id = k.event_id AND e.revision = k.revision AND e.attempts = k.attempts
      AND e.updated_at = k.updated_at;
    DROP TABLE billing_sink_events_010_kept;
END
$$;

-- A customer's billing cycle: the invoice period of a key runs from its
-- anchor day (1–31, the month's last day when shorter) at 00:00 in
-- time_zone; both NULL: the UTC calendar month. stripe-sync stamps a
-- correction whose invoice period is already finalized with the time it is
-- sent, so that it lands on the customer's current invoice.
ALTER TABLE stripe_customers
    ADD COLUMN anchor_day int CHECK (anchor_day BETWEEN 1 AND 31),
    ADD COLUMN time_zone text,
    ADD CONSTRAINT stripe_customers_anchor_check CHECK ((anchor_day IS NULL) = (time_zone IS NULL));

---- create above / drop below ----

ALTER TABLE stripe_customers
    DROP CONSTRAINT stripe_customers_anchor_check,
    DROP COLUMN time_zone,
    DROP COLUMN anchor_day;

-- Nothing is deleted: hour rows, and what the older schema cannot hold
-- (pending and held statuses, frames, first attempts), wait in
-- billing_sink_events_010_kept for a re-upgrade to put back; without them
-- it would send every hour and every pending event again.
CREATE TABLE billing_sink_events_010_kept AS
    SELECT * FROM billing_sink_events
    WHERE granularity = 'hour' OR status IN ('pending', 'held') OR frame IS NOT NULL OR first_attempt_at IS NOT NULL;
DELETE FROM billing_sink_events WHERE granularity = 'hour';
UPDATE billing_sink_events SET status = 'failed' WHERE status IN ('pending', 'held');
ALTER TABLE billing_sink_events
    DROP COLUMN first_attempt_at,
    DROP COLUMN frame,
    DROP CONSTRAINT billing_sink_events_granularity_check,
    ADD CONSTRAINT billing_sink_events_granularity_check CHECK (granularity IN ('day', 'month')),
    DROP CONSTRAINT billing_sink_events_status_check,
    ADD CONSTRAINT billing_sink_events_status_check CHECK (status IN ('sent', 'failed'));
