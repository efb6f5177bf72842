-- What reconciler events sent to each sink: one row per (sink, key,
-- period, granularity), holding the latest event for that period. A period
-- is sent once (revision 0); when the ledger's figures for it change
-- later (a late report), a correction with the next revision replaces it.
-- status 'failed' means the latest event was not acknowledged: the next
-- run sends that same event again (same id, same data) before anything
-- newer. acked_spent is what the sink holds for the period: the spent of
-- the last acknowledged event (0 before any).
CREATE TABLE billing_sink_events (
    sink         text        NOT NULL,
    key          text        NOT NULL,
    period_start timestamptz NOT NULL,
    granularity  text        NOT NULL CHECK (granularity IN ('day', 'month')),
    period_end   timestamptz NOT NULL,
    revision     int         NOT NULL CHECK (revision >= 0),
    event_id     text        NOT NULL,
    spent        bigint      NOT NULL CHECK (spent >= 0),
    rejected     bigint      NOT NULL CHECK (rejected >= 0),
    degraded     bigint      NOT NULL CHECK (degraded >= 0),
    acked_spent  bigint      NOT NULL DEFAULT 0,
    data         jsonb       NOT NULL,
    status       text        NOT NULL CHECK (status IN ('sent', 'failed')),
    attempts     int         NOT NULL DEFAULT 1,
    last_error   text,
    sent_at      timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sink, key, period_start, granularity)
);

COMMENT ON TABLE billing_sink_events IS 'Latest usage event per (sink, key, period, granularity); written by reconciler events.';
COMMENT ON COLUMN billing_sink_events.acked_spent IS 'spent of the last event the sink acknowledged: what it holds for the period.';

CREATE INDEX billing_sink_events_period ON billing_sink_events (sink, granularity, period_start);

---- create above / drop below ----

DROP TABLE billing_sink_events;
