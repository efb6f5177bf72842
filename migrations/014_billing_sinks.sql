-- The sink registry (issue 36). A sink (a Stripe meter, a CloudEvents
-- target) records on its first run the granularity and calendar its
-- periods are cut by and the rule that names the customer of a period, and
-- every later run must ask the same: a second granularity on one Stripe
-- meter billed the same usage twice (an hourly and a monthly run each sent
-- it), a second calendar would re-cut periods already sent. NULL: not
-- recorded yet (the next run records it).
--
-- looked_through is the sink's watermark: every period that starts before
-- it and was complete when a run read it has been recorded (in
-- billing_sink_events, whatever its status) or deliberately skipped (a key
-- without a customer). A run reads back to it however long the runs were
-- stopped, so an outage longer than the lookback leaves nothing unsent.
CREATE TABLE billing_sinks (
    sink           text        PRIMARY KEY,
    granularity    text        CHECK (granularity IN ('hour', 'day', 'month')),
    calendar       text        CHECK (calendar IN ('utc', 'plan')),
    customer_rule  text,
    looked_through timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE billing_sinks IS 'Each sink''s granularity, calendar and customer rule, fixed by its first run; looked_through: every complete period before it was recorded or skipped.';

-- A sink that sent one granularity only is registered with it; one that
-- sent two (the double billing above) is left for its next run to record,
-- and its operator to stop the other.
INSERT INTO billing_sinks (sink, granularity)
SELECT sink, min(granularity) FROM billing_sink_events GROUP BY sink HAVING count(DISTINCT granularity) = 1;

-- The unsent gauges count what is not acknowledged over the whole table,
-- however old; this keeps that read to the unsent rows.
CREATE INDEX billing_sink_events_unsent ON billing_sink_events (sink, period_end) WHERE status <> 'sent';

-- maybe_stored: an earlier attempt of the recorded request may have
-- reached the sink (timed out, answer lost, 5xx), as opposed to refusals
-- that store nothing (429, connection refused). Only a request no attempt
-- may have stored can be re-stamped when its invoice was finalized
-- meanwhile. Rows from before are unknown: maybe.
ALTER TABLE billing_sink_events ADD COLUMN maybe_stored boolean NOT NULL DEFAULT true;

COMMENT ON COLUMN billing_sink_events.maybe_stored IS 'An earlier attempt of the recorded frame may have reached the sink; false: every attempt was refused outright.';

---- create above / drop below ----

ALTER TABLE billing_sink_events DROP COLUMN maybe_stored;
DROP INDEX billing_sink_events_unsent;
DROP TABLE billing_sinks;
