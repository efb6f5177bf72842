-- Incremental sink passes (issue 36, item 8). A continuous pass read every
-- key's whole history twice; now it reads only the keys whose rows changed
-- since its checkpoint.
--
-- changed_xid is the id of the transaction that last wrote the row: new
-- rows by default, updates (the reconciler's upsert, the closer) by the
-- trigger. A pass records as its checkpoint the oldest transaction still
-- running when it started (pg_snapshot_xmin): every transaction below it
-- had ended, so its rows were visible to the pass, and one that commits
-- later, whatever its id, has an id at or above it and is read by the next
-- pass. Rows from before this migration are NULL: older than any
-- checkpoint (a sink's first pass reads everything). The column is added
-- without a default first so that existing partitions are not rewritten.
ALTER TABLE usage_reports ADD COLUMN changed_xid xid8;
ALTER TABLE usage_reports ALTER COLUMN changed_xid SET DEFAULT pg_current_xact_id();

CREATE FUNCTION usage_reports_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed_xid := pg_current_xact_id();
    RETURN NEW;
END $$;

CREATE TRIGGER usage_reports_touch BEFORE UPDATE ON usage_reports
    FOR EACH ROW EXECUTE FUNCTION usage_reports_touch();

CREATE INDEX usage_reports_changed ON usage_reports (changed_xid) WHERE changed_xid IS NOT NULL;

COMMENT ON COLUMN usage_reports.changed_xid IS 'Transaction that last wrote the row (NULL: before migration 017); sinks read rows at or above their checkpoint.';

-- checkpoint_xid: the next incremental pass reads rows with changed_xid at
-- or above it (NULL: none yet, the next pass reads everything);
-- checked_at: that pass's now, so the next one also reads the keys whose
-- periods ended since; plans_digest (plan calendar): the catalogue's plans
-- then, a pass reads everything when they changed.
ALTER TABLE billing_sinks ADD COLUMN checkpoint_xid xid8, ADD COLUMN checked_at timestamptz,
    ADD COLUMN plans_digest text;

-- Keys a pass must read again whatever changes: a period that differs
-- from what the sink acknowledged (unsent, refused, held, re-opened) or
-- that the sink's Skip held back (a key without a customer).
CREATE TABLE billing_sink_revisits (
    sink text NOT NULL,
    key  text NOT NULL,
    PRIMARY KEY (sink, key)
);

COMMENT ON TABLE billing_sink_revisits IS 'Keys an incremental sink pass reads again, however unchanged: they differ from what the sink acknowledged, or were skipped.';

---- create above / drop below ----

DROP TABLE billing_sink_revisits;
ALTER TABLE billing_sinks DROP COLUMN plans_digest, DROP COLUMN checked_at, DROP COLUMN checkpoint_xid;
DROP INDEX usage_reports_changed;
DROP TRIGGER usage_reports_touch ON usage_reports;
DROP FUNCTION usage_reports_touch();
ALTER TABLE usage_reports DROP COLUMN changed_xid;
