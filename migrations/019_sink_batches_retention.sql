-- Sink bookkeeping for batched sends, settlement and retention (issue 36,
-- item 8).
--
-- last_attempt_at: when the current event was last sent (the send time of
-- its latest attempt). Stripe's meter event summaries lag what it stored,
-- so an event an ambiguous attempt may have stored is settled against them
-- only once its last attempt is old enough. NULL for rows from before:
-- first_attempt_at stands in.
ALTER TABLE billing_sink_events ADD COLUMN last_attempt_at timestamptz;

COMMENT ON COLUMN billing_sink_events.last_attempt_at IS 'Send time of the latest attempt of the current event_id (NULL: before migration 019).';

-- Retention (reconciler retention --sink-keep): hourly continuous passes
-- write a row per key and hour, 2.4M a day for 100k keys. A row that the
-- sink acknowledged, of a period that ended before the cutoff and before
-- the sink's watermark, is removed; per key and UTC month the figures an
-- audit of the removed rows needs are added to billing_sink_retained. Rows
-- not acknowledged (pending, failed, held) stay however old. retained_before
-- tells the sink's runs that a period ending at or before it with no row
-- was acknowledged and removed: it is never sent again.
ALTER TABLE billing_sinks ADD COLUMN retained_before timestamptz;

COMMENT ON COLUMN billing_sinks.retained_before IS 'Acknowledged billing_sink_events rows of periods ending at or before it were removed by retention (billing_sink_retained); runs never resend them.';

CREATE TABLE billing_sink_retained (
    sink        text        NOT NULL,
    key         text        NOT NULL,
    granularity text        NOT NULL,
    month       timestamptz NOT NULL,
    periods     bigint      NOT NULL,
    revisions   bigint      NOT NULL,
    billed      bigint      NOT NULL,
    first_sent  timestamptz,
    last_sent   timestamptz,
    PRIMARY KEY (sink, key, granularity, month)
);

COMMENT ON TABLE billing_sink_retained IS 'Per sink, key and UTC month: the acknowledged periods retention removed from billing_sink_events, their corrections and the billed figure the sink holds for them.';

-- Retention reads the acknowledged rows of a sink by period end.
CREATE INDEX billing_sink_events_sent_end ON billing_sink_events (sink, period_end) WHERE status = 'sent';

---- create above / drop below ----

-- Once retention removed rows, the older schema cannot tell a removed
-- period from an unsent one, and an explicit run over it would send it
-- again: the rollback is refused.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM billing_sinks WHERE retained_before IS NOT NULL) THEN
        RAISE EXCEPTION 'migration 019: sink retention removed acknowledged rows (billing_sinks.retained_before); rolling back would resend them';
    END IF;
END
$$;
DROP INDEX billing_sink_events_sent_end;
DROP TABLE billing_sink_retained;
ALTER TABLE billing_sinks DROP COLUMN retained_before;
ALTER TABLE billing_sink_events DROP COLUMN last_attempt_at;
