-- 018: a window's age, not its sender's window_end, decides when it is
-- overdue (issue 37, item 4). A row with window_end 9999-01-01 that never
-- sent its final report was never incomplete in the views, so nothing
-- said why its key's periods stayed open. The reconciler refuses windows
-- longer than a day (long_window) and its closer takes any row's window
-- to end a day after its start; the views now judge the same way, so a
-- row written before that bound, or directly, is flagged once it is old.

-- The longest accounting window (reconcile.MaxWindow): a window is taken
-- to have ended by this long after its start, whatever its window_end.
-- 24 hours, not 1 day: an interval of hours does not move with the
-- session's time zone.
CREATE FUNCTION usage_max_window() RETURNS interval
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT interval '24 hours' $$;

-- When a row's window counts as ended: its window_end, or
-- usage_max_window() after its start if that is earlier. STABLE, as
-- timestamptz + interval is: it is inlined into the views.
CREATE FUNCTION usage_window_ended(window_start timestamptz, window_end timestamptz) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT least($2, $1 + usage_max_window()) $$;

CREATE OR REPLACE VIEW usage_windows AS
SELECT key,
       window_start,
       max(window_end)                         AS window_end,
       usage_saturate(sum(spent) + sum(charged) - sum(refunded)) AS spent,
       usage_saturate(sum(leased))             AS leased,
       usage_saturate(sum(rejected))           AS rejected,
       usage_saturate(sum(degraded))           AS degraded,
       count(*)::int                           AS processes,
       array_agg(DISTINCT region ORDER BY region) AS regions,
       bool_or(degraded > 0)                   AS is_degraded,
       bool_and(final)                         AS complete,
       bool_or(NOT final AND now() > usage_window_ended(window_start, window_end) + usage_final_grace()) AS incomplete,
       usage_saturate(sum(spent))              AS allowed,
       usage_saturate(sum(refunded))           AS refunded,
       usage_saturate(sum(charged))            AS charged,
       count(closed_at)::int                   AS closed_by_reconciler,
       usage_overflows(sum(spent) + sum(charged) - sum(refunded), sum(leased), sum(rejected), sum(degraded),
                       sum(spent), sum(refunded), sum(charged)) AS overflow,
       usage_saturate(sum(spent) + sum(charged) - sum(refunded)) AS net
FROM usage_reports
GROUP BY key, window_start;

COMMENT ON VIEW usage_windows IS 'Usage per key and accounting window. net = allowed + charged - refunded (spent: net''s deprecated name, same value). complete: every process sent its final report or was closed by the reconciler (closed_by_reconciler of them); incomplete: a process is overdue (a window counts as ended at most usage_max_window() after its start, whatever its window_end); overflow: a figure passed ±(2^63-1) and is saturated there.';

CREATE OR REPLACE VIEW usage_incomplete_windows AS
SELECT key, window_start, window_end, process_id, region, spent AS allowed, leased, seq, updated_at AS last_report_at
FROM usage_reports
WHERE NOT final AND now() > usage_window_ended(window_start, window_end) + usage_final_grace();

COMMENT ON VIEW usage_incomplete_windows IS 'Rows of processes overdue with their final report: their window ended (at most usage_max_window() after its start) more than usage_final_grace() ago.';

-- Retention's open credit follows the export's rule (ledger/export, Row):
-- credit never exceeds what the key was billed before, so a refund beyond
-- it (a forged or pre-bound report) no longer holds a month attached for
-- ever. With cum the cumulative net and low = min(0, its running minimum),
-- cum - low is the cumulative net floored at zero.
CREATE OR REPLACE FUNCTION usage_open_credit(boundary timestamptz) RETURNS TABLE (key text, credit numeric)
    LANGUAGE sql STABLE SET TimeZone = 'UTC' AS $$
WITH h AS (
    SELECT r.key, date_trunc('hour', r.window_start) AS hour,
           sum(r.spent::numeric + r.charged - r.refunded) AS net
    FROM usage_reports r
    WHERE r.window_start < boundary
    GROUP BY 1, 2
), c AS (
    SELECT h.key, h.hour, sum(h.net) OVER (PARTITION BY h.key ORDER BY h.hour) AS cum
    FROM h
), l AS (
    SELECT c.key, c.hour, c.cum - least(0, min(c.cum) OVER (PARTITION BY c.key ORDER BY c.hour)) AS cum
    FROM c
), d AS (
    SELECT l.key, max(l.cum) OVER (PARTITION BY l.key ORDER BY l.hour) - l.cum AS credit,
           row_number() OVER (PARTITION BY l.key ORDER BY l.hour DESC) AS last
    FROM l
)
SELECT d.key, d.credit FROM d WHERE d.last = 1 AND d.credit > 0
$$;

---- create above / drop below ----

CREATE OR REPLACE FUNCTION usage_open_credit(boundary timestamptz) RETURNS TABLE (key text, credit numeric)
    LANGUAGE sql STABLE SET TimeZone = 'UTC' AS $$
WITH h AS (
    SELECT r.key, date_trunc('hour', r.window_start) AS hour,
           sum(r.spent::numeric + r.charged - r.refunded) AS net
    FROM usage_reports r
    WHERE r.window_start < boundary
    GROUP BY 1, 2
), c AS (
    SELECT h.key, h.hour, sum(h.net) OVER (PARTITION BY h.key ORDER BY h.hour) AS cum
    FROM h
), d AS (
    SELECT c.key, greatest(0, max(c.cum) OVER (PARTITION BY c.key ORDER BY c.hour)) - c.cum AS credit,
           row_number() OVER (PARTITION BY c.key ORDER BY c.hour DESC) AS last
    FROM c
)
SELECT d.key, d.credit FROM d WHERE d.last = 1 AND d.credit > 0
$$;

CREATE OR REPLACE VIEW usage_incomplete_windows AS
SELECT key, window_start, window_end, process_id, region, spent AS allowed, leased, seq, updated_at AS last_report_at
FROM usage_reports
WHERE NOT final AND now() > window_end + usage_final_grace();

COMMENT ON VIEW usage_incomplete_windows IS NULL;

CREATE OR REPLACE VIEW usage_windows AS
SELECT key,
       window_start,
       max(window_end)                         AS window_end,
       usage_saturate(sum(spent) + sum(charged) - sum(refunded)) AS spent,
       usage_saturate(sum(leased))             AS leased,
       usage_saturate(sum(rejected))           AS rejected,
       usage_saturate(sum(degraded))           AS degraded,
       count(*)::int                           AS processes,
       array_agg(DISTINCT region ORDER BY region) AS regions,
       bool_or(degraded > 0)                   AS is_degraded,
       bool_and(final)                         AS complete,
       bool_or(NOT final AND now() > window_end + usage_final_grace()) AS incomplete,
       usage_saturate(sum(spent))              AS allowed,
       usage_saturate(sum(refunded))           AS refunded,
       usage_saturate(sum(charged))            AS charged,
       count(closed_at)::int                   AS closed_by_reconciler,
       usage_overflows(sum(spent) + sum(charged) - sum(refunded), sum(leased), sum(rejected), sum(degraded),
                       sum(spent), sum(refunded), sum(charged)) AS overflow,
       usage_saturate(sum(spent) + sum(charged) - sum(refunded)) AS net
FROM usage_reports
GROUP BY key, window_start;

COMMENT ON VIEW usage_windows IS 'Usage per key and accounting window. net = allowed + charged - refunded (spent: net''s deprecated name, same value). complete: every process sent its final report or was closed by the reconciler (closed_by_reconciler of them); incomplete: a process is overdue; overflow: a figure passed ±(2^63-1) and is saturated there.';

DROP FUNCTION usage_window_ended(timestamptz, timestamptz);
DROP FUNCTION usage_max_window();
