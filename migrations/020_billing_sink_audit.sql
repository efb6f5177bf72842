-- The audit trail of sink events (issue 36, "what finance asks for").
-- billing_sink_events holds one row per (sink, key, period) that each
-- revision, attempt and answer overwrites; finance needs every one of
-- them, in order, never changed. A trigger on billing_sink_events appends
-- one row here for each change that matters, so every writer (a run, a
-- batched send, stripe-settle, a settlement by Stripe's summaries) is
-- audited without asking it to:
--   request  a revision recorded before its first attempt (data, frame)
--   resend   an attempt of the recorded event again (frame)
--   answer   the sink's answer to an attempt: status sent or failed,
--            answer the error (trimmed to 2000 characters), status_code
--            the HTTP status it names (NULL: acknowledged, or no answer)
--   restamp  a new frame for the recorded event (its invoice finalized)
--   held     left for a person: past the dedupe window, or maybe stored
--   settle   decided without an attempt: decision delivered (the sink's
--            records or a person say it holds it) or missing (a person
--            says it does not: sent again)
-- Rows are never updated or deleted (billing_sink_audit_append_only).
CREATE TABLE billing_sink_audit (
    id           bigserial   PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    sink         text        NOT NULL,
    key          text        NOT NULL,
    period_start timestamptz NOT NULL,
    period_end   timestamptz NOT NULL,
    granularity  text        NOT NULL,
    revision     int         NOT NULL,
    event_id     text        NOT NULL,
    action       text        NOT NULL CHECK (action IN ('request', 'resend', 'answer', 'restamp', 'held', 'settle')),
    status       text        NOT NULL,
    billed       bigint      NOT NULL,
    acked        bigint      NOT NULL,
    attempts     int         NOT NULL,
    status_code  int,
    answer       text,
    decision     text        CHECK (decision IN ('delivered', 'missing')),
    data         jsonb,
    frame        jsonb
);

COMMENT ON TABLE billing_sink_audit IS 'Every request, answer and decision about a sink event, appended by a trigger on billing_sink_events; never changed.';

CREATE INDEX billing_sink_audit_period ON billing_sink_audit (key, period_start, id);

CREATE FUNCTION billing_sink_audit_append() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER billing_sink_audit_append AFTER INSERT OR UPDATE ON billing_sink_events
    FOR EACH ROW EXECUTE FUNCTION billing_sink_audit_append();

-- The repository grants no per-role privileges, so append-only is the
-- table's own rule: an update or delete is refused, whoever asks.
CREATE FUNCTION billing_sink_audit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'billing_sink_audit is append-only: % refused', TG_OP;
END $$;

CREATE TRIGGER billing_sink_audit_append_only BEFORE UPDATE OR DELETE ON billing_sink_audit
    FOR EACH ROW EXECUTE FUNCTION billing_sink_audit_refuse();
CREATE TRIGGER billing_sink_audit_no_truncate BEFORE TRUNCATE ON billing_sink_audit
    FOR EACH STATEMENT EXECUTE FUNCTION billing_sink_audit_refuse();

---- create above / drop below ----

DROP TRIGGER billing_sink_audit_append ON billing_sink_events;
DROP FUNCTION billing_sink_audit_append();
DROP TABLE billing_sink_audit;
DROP FUNCTION billing_sink_audit_refuse();
