-- One vocabulary (issue 36, item 7): spent leaves the views. 013 kept it
-- in usage_windows, usage_by_hour, usage_by_day and usage_degraded_windows
-- as net's deprecated name (same value) for one release; in usage_reports
-- and the limiters' reports spent is the gross allowed cost, so one name
-- meant two figures. Read net for what is billed, allowed for the gross.
-- usage_reports.spent stays: the gross allowed cost, as limiters report it.
--
-- CREATE OR REPLACE VIEW cannot drop a column, so the views are dropped
-- and created again, the views built on usage_windows first and last.
-- Every other column keeps its name, order, type and meaning; overflow's
-- sum(spent) was sum(net) under the old name. The views have no grants
-- or column comments; usage_windows's comment is given again, without
-- spent.
DROP VIEW usage_degraded_windows;
DROP VIEW usage_by_day;
DROP VIEW usage_by_hour;
DROP VIEW usage_windows;

CREATE VIEW usage_windows AS
SELECT key,
       window_start,
       max(window_end)                         AS window_end,
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

COMMENT ON VIEW usage_windows IS 'Usage per key and accounting window. allowed: gross cost of allowed decisions (usage_reports.spent); net = allowed + charged - refunded, what is billed. complete: every process sent its final report or was closed by the reconciler (closed_by_reconciler of them); incomplete: a process is overdue (a window counts as ended at most usage_max_window() after its start, whatever its window_end); overflow: a figure passed ±(2^63-1) and is saturated there.';

CREATE VIEW usage_by_hour AS
SELECT key,
       date_trunc('hour', window_start, 'UTC') AS hour,
       usage_saturate(sum(leased))   AS leased,
       usage_saturate(sum(rejected)) AS rejected,
       usage_saturate(sum(degraded)) AS degraded,
       count(*)::int         AS windows,
       count(*) FILTER (WHERE is_degraded)::int AS degraded_windows,
       bool_or(is_degraded)  AS is_degraded,
       bool_and(complete)    AS complete,
       bool_or(incomplete)   AS incomplete,
       usage_saturate(sum(allowed))  AS allowed,
       usage_saturate(sum(refunded)) AS refunded,
       usage_saturate(sum(charged))  AS charged,
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int AS closed_windows,
       bool_or(overflow) OR usage_overflows(sum(net), sum(leased), sum(rejected), sum(degraded),
                                            sum(allowed), sum(refunded), sum(charged)) AS overflow,
       usage_saturate(sum(net))      AS net
FROM usage_windows
GROUP BY key, date_trunc('hour', window_start, 'UTC');

CREATE VIEW usage_by_day AS
SELECT key,
       date_trunc('day', window_start, 'UTC') AS day,
       usage_saturate(sum(leased))   AS leased,
       usage_saturate(sum(rejected)) AS rejected,
       usage_saturate(sum(degraded)) AS degraded,
       count(*)::int         AS windows,
       count(*) FILTER (WHERE is_degraded)::int AS degraded_windows,
       bool_or(is_degraded)  AS is_degraded,
       bool_and(complete)    AS complete,
       bool_or(incomplete)   AS incomplete,
       usage_saturate(sum(allowed))  AS allowed,
       usage_saturate(sum(refunded)) AS refunded,
       usage_saturate(sum(charged))  AS charged,
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int AS closed_windows,
       bool_or(overflow) OR usage_overflows(sum(net), sum(leased), sum(rejected), sum(degraded),
                                            sum(allowed), sum(refunded), sum(charged)) AS overflow,
       usage_saturate(sum(net))      AS net
FROM usage_windows
GROUP BY key, date_trunc('day', window_start, 'UTC');

CREATE VIEW usage_degraded_windows AS
SELECT key, window_start, window_end, degraded, regions, processes, complete, net
FROM usage_windows
WHERE is_degraded;

---- create above / drop below ----

-- The views of 018 (usage_windows) and 013 (the others), spent included,
-- and usage_windows's comment of 018.
DROP VIEW usage_degraded_windows;
DROP VIEW usage_by_day;
DROP VIEW usage_by_hour;
DROP VIEW usage_windows;

CREATE VIEW usage_windows AS
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

CREATE VIEW usage_by_hour AS
SELECT key,
       date_trunc('hour', window_start, 'UTC') AS hour,
       usage_saturate(sum(spent))    AS spent,
       usage_saturate(sum(leased))   AS leased,
       usage_saturate(sum(rejected)) AS rejected,
       usage_saturate(sum(degraded)) AS degraded,
       count(*)::int         AS windows,
       count(*) FILTER (WHERE is_degraded)::int AS degraded_windows,
       bool_or(is_degraded)  AS is_degraded,
       bool_and(complete)    AS complete,
       bool_or(incomplete)   AS incomplete,
       usage_saturate(sum(allowed))  AS allowed,
       usage_saturate(sum(refunded)) AS refunded,
       usage_saturate(sum(charged))  AS charged,
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int AS closed_windows,
       bool_or(overflow) OR usage_overflows(sum(spent), sum(leased), sum(rejected), sum(degraded),
                                            sum(allowed), sum(refunded), sum(charged)) AS overflow,
       usage_saturate(sum(net))      AS net
FROM usage_windows
GROUP BY key, date_trunc('hour', window_start, 'UTC');

CREATE VIEW usage_by_day AS
SELECT key,
       date_trunc('day', window_start, 'UTC') AS day,
       usage_saturate(sum(spent))    AS spent,
       usage_saturate(sum(leased))   AS leased,
       usage_saturate(sum(rejected)) AS rejected,
       usage_saturate(sum(degraded)) AS degraded,
       count(*)::int         AS windows,
       count(*) FILTER (WHERE is_degraded)::int AS degraded_windows,
       bool_or(is_degraded)  AS is_degraded,
       bool_and(complete)    AS complete,
       bool_or(incomplete)   AS incomplete,
       usage_saturate(sum(allowed))  AS allowed,
       usage_saturate(sum(refunded)) AS refunded,
       usage_saturate(sum(charged))  AS charged,
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int AS closed_windows,
       bool_or(overflow) OR usage_overflows(sum(spent), sum(leased), sum(rejected), sum(degraded),
                                            sum(allowed), sum(refunded), sum(charged)) AS overflow,
       usage_saturate(sum(net))      AS net
FROM usage_windows
GROUP BY key, date_trunc('day', window_start, 'UTC');

CREATE VIEW usage_degraded_windows AS
SELECT key, window_start, window_end, spent, degraded, regions, processes, complete, net
FROM usage_windows
WHERE is_degraded;
