-- Stored carries (issue 36, item 8). An export's figures for a key's
-- period depend on the key's whole history before it (the carry-over of
-- export.Row: cumulative net, its lowest point, cumulative billed), so a
-- continuous pass read every row of each changed key back to its first
-- report, one heap page per hourly row, growing with retained history.
-- A pass now stores, per key, that state as of a boundary it read past,
-- and the sink's next pass starts from it and reads only the rows from
-- the boundary on.
--
-- A row is the carry of the key's periods that start before carried_at:
--   carried_at  the start of a period of the key on the sink's calendar
--               (the first one the writing pass read at or after
--               valid_from): the next pass reads windows from here on;
--   valid_from  no period of the key started in [valid_from, carried_at)
--               when it was written, so an export whose From is at or
--               after valid_from may start from it;
--   cum_net     the sum of the nets of those periods;
--   low         min(0, the lowest cumulative net after any of them);
--   cum_billed  the highest cumulative net floored by low (what was
--               billed over them).
-- It stays exact while no row of the key before carried_at is written
-- again: every sink pass deletes the carries of keys with a row written
-- since its checkpoint (usage_reports.changed_xid, migration 017) before
-- carried_at, and a pass that reads everything deletes all of the sink's.
-- Retention detaches partitions without writing rows, so a carry outlives
-- the rows it sums. Granularity and calendar are the sink's (migration
-- 014); the plan calendar's cuts depend on the sink's recorded periods
-- too, so carries belong to one sink.
CREATE TABLE billing_sink_carries (
    sink        text        NOT NULL REFERENCES billing_sinks (sink) ON DELETE CASCADE,
    key         text        NOT NULL,
    valid_from  timestamptz NOT NULL,
    carried_at  timestamptz NOT NULL CHECK (carried_at >= valid_from),
    granularity text        NOT NULL CHECK (granularity IN ('hour', 'day', 'month')),
    calendar    text        NOT NULL CHECK (calendar IN ('utc', 'plan')),
    cum_net     bigint      NOT NULL,
    low         bigint      NOT NULL CHECK (low <= 0),
    cum_billed  bigint      NOT NULL CHECK (cum_billed >= 0),
    written_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sink, key, valid_from)
);

COMMENT ON TABLE billing_sink_carries IS 'Per sink and key, the carry-over of the key''s periods before carried_at, so that a pass reads only rows from carried_at on; deleted when a row before carried_at is written again.';

---- create above / drop below ----

DROP TABLE billing_sink_carries;
