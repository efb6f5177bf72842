-- One vocabulary (issue 36, item 7): in the ledger's tables spent is the
-- gross allowed cost (usage_reports.spent). billing_sink_events.spent and
-- acked_spent hold the billed figure a sink is sent and the one it
-- acknowledged (migration 004 named them before net billing, when billed
-- was the gross cost): they are billed and acked_billed, as the events,
-- the export and billing_sink_retained name that figure. Rows written
-- before net billing keep the gross cost they sent, which was then what
-- was billed.
--
-- Indexes, constraints' expressions and views follow a rename; a PL/pgSQL
-- body names columns as text and would fail only when it runs, so the
-- audit trigger's function (migration 020) is replaced with one naming
-- the new columns. The check constraint is renamed after its column.
ALTER TABLE billing_sink_events RENAME COLUMN spent TO billed;
ALTER TABLE billing_sink_events RENAME COLUMN acked_spent TO acked_billed;
ALTER TABLE billing_sink_events RENAME CONSTRAINT billing_sink_events_spent_check TO billing_sink_events_billed_check;

COMMENT ON COLUMN billing_sink_events.billed IS 'Billed figure of the latest event (export.Row.Billed; rows from before net billing: the gross cost then billed).';
COMMENT ON COLUMN billing_sink_events.acked_billed IS 'Billed figure of the last event the sink acknowledged: what it holds for the period (0 before any).';

CREATE OR REPLACE FUNCTION billing_sink_audit_append() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    act  text;
    dec  text;
    code int;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.event_id <> OLD.event_id THEN
        act := 'request';
    ELSIF NEW.attempts > OLD.attempts THEN
        act := 'answer';
        IF NEW.status <> 'sent' THEN
            -- A Stripe error names its status as JSON ("status":429); a
            -- CloudEvents receiver's as "sink: http: 503: …".
            code := coalesce(substring(NEW.last_error FROM '"status":\s*([0-9]{3})'),
                             substring(NEW.last_error FROM '^sink: http: ([0-9]{3})'))::int;
        END IF;
    ELSIF NEW.status = 'pending' AND OLD.status <> 'pending' THEN
        act := 'resend';
    ELSIF NEW.status = 'held' AND OLD.status <> 'held' THEN
        act := 'held';
    ELSIF NEW.status = 'sent' AND OLD.status <> 'sent' THEN
        act := 'settle';
        dec := 'delivered';
    ELSIF OLD.status = 'held' AND NEW.status = 'failed' THEN
        act := 'settle';
        dec := 'missing';
    ELSIF NEW.frame IS DISTINCT FROM OLD.frame THEN
        act := 'restamp';
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO billing_sink_audit (sink, key, period_start, period_end, granularity, revision, event_id, action, status,
                                    billed, acked, attempts, status_code, answer, decision, data, frame)
    VALUES (NEW.sink, NEW.key, NEW.period_start, NEW.period_end, NEW.granularity, NEW.revision, NEW.event_id, act,
            NEW.status, NEW.billed, NEW.acked_billed, NEW.attempts, code,
            CASE WHEN act = 'answer' THEN left(NEW.last_error, 2000) END, dec,
            CASE WHEN act = 'request' THEN NEW.data END,
            CASE WHEN act IN ('request', 'resend', 'restamp') THEN NEW.frame END);
    RETURN NULL;
END $$;

---- create above / drop below ----

-- Back to 020's names and its trigger function, which names them.
ALTER TABLE billing_sink_events RENAME CONSTRAINT billing_sink_events_billed_check TO billing_sink_events_spent_check;
ALTER TABLE billing_sink_events RENAME COLUMN acked_billed TO acked_spent;
ALTER TABLE billing_sink_events RENAME COLUMN billed TO spent;

COMMENT ON COLUMN billing_sink_events.spent IS NULL;
COMMENT ON COLUMN billing_sink_events.acked_spent IS 'spent of the last event the sink acknowledged: what it holds for the period.';

CREATE OR REPLACE FUNCTION billing_sink_audit_append() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    act  text;
    dec  text;
    code int;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.event_id <> OLD.event_id THEN
        act := 'request';
    ELSIF NEW.attempts > OLD.attempts THEN
        act := 'answer';
        IF NEW.status <> 'sent' THEN
            -- A Stripe error names its status as JSON ("status":429); a
            -- CloudEvents receiver's as "sink: http: 503: …".
            code := coalesce(substring(NEW.last_error FROM '"status":\s*([0-9]{3})'),
                             substring(NEW.last_error FROM '^sink: http: ([0-9]{3})'))::int;
        END IF;
    ELSIF NEW.status = 'pending' AND OLD.status <> 'pending' THEN
        act := 'resend';
    ELSIF NEW.status = 'held' AND OLD.status <> 'held' THEN
        act := 'held';
    ELSIF NEW.status = 'sent' AND OLD.status <> 'sent' THEN
        act := 'settle';
        dec := 'delivered';
    ELSIF OLD.status = 'held' AND NEW.status = 'failed' THEN
        act := 'settle';
        dec := 'missing';
    ELSIF NEW.frame IS DISTINCT FROM OLD.frame THEN
        act := 'restamp';
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO billing_sink_audit (sink, key, period_start, period_end, granularity, revision, event_id, action, status,
                                    billed, acked, attempts, status_code, answer, decision, data, frame)
    VALUES (NEW.sink, NEW.key, NEW.period_start, NEW.period_end, NEW.granularity, NEW.revision, NEW.event_id, act,
            NEW.status, NEW.spent, NEW.acked_spent, NEW.attempts, code,
            CASE WHEN act = 'answer' THEN left(NEW.last_error, 2000) END, dec,
            CASE WHEN act = 'request' THEN NEW.data END,
            CASE WHEN act IN ('request', 'resend', 'restamp') THEN NEW.frame END);
    RETURN NULL;
END $$;
