-- One vocabulary for billing (issue 36): allowed (gross cost of allowed
-- decisions), charged, refunded and net = allowed + charged - refunded,
-- as the API, the CLI, the CSV and the export name them. "spent" meant net
-- in some views and allowed in others:
--   * views where spent was net gain a net column; spent stays beside it,
--     same value, for one release (deprecated);
--   * views where spent was the gross allowed cost rename it allowed.
-- usage_reports.spent, the table's column, is the gross allowed cost.
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

CREATE OR REPLACE VIEW usage_by_hour AS
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

CREATE OR REPLACE VIEW usage_by_day AS
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

CREATE OR REPLACE VIEW usage_degraded_windows AS
SELECT key, window_start, window_end, spent, degraded, regions, processes, complete, net
FROM usage_windows
WHERE is_degraded;

ALTER VIEW usage_over_authorization RENAME COLUMN spent TO allowed;
ALTER VIEW usage_closed_windows RENAME COLUMN spent TO allowed;
ALTER VIEW usage_incomplete_windows RENAME COLUMN spent TO allowed;

COMMENT ON COLUMN usage_reports.spent IS 'Gross cost of the allowed decisions of the row (the views call it allowed).';

---- create above / drop below ----

-- The net columns stay (CREATE OR REPLACE VIEW cannot drop a column, and
-- older code names the columns it reads); only the renames are undone.
ALTER VIEW usage_incomplete_windows RENAME COLUMN allowed TO spent;
ALTER VIEW usage_closed_windows RENAME COLUMN allowed TO spent;
ALTER VIEW usage_over_authorization RENAME COLUMN allowed TO spent;
COMMENT ON COLUMN usage_reports.spent IS NULL;
