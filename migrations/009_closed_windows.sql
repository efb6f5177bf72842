-- Windows of dead processes, closed by the reconciler (docs/design.md
-- [reconciliation]; ledger/README.md "Completeness"). A process killed
-- without its final report (SIGKILL, OOM, a lost node) leaves its rows of
-- usage_reports non-final for ever, and a window, hour, day or billing
-- period is complete only when every row in it is final: without this, one
-- dead process kept its keys' whole month, other processes' usage included,
-- from every sink.
--
-- reconciler serve --close-after D closes such a row: once its window ended
-- more than D ago and its last report was written more than D ago, it is
-- marked final, with closed_at and closed_by set. Its figures stay those of
-- the process's last report: what was spent after it is lost (the process
-- died with it). A report that comes later still lands (the writer's merge
-- takes greater figures and higher seqs whatever final says): the row stays
-- final and closed, its updated_at moves past closed_at (the views'
-- late_report), and the sinks send a correction for the changed figures.
--
-- The columns are NULL on every existing row, so adding them rewrites
-- nothing. There is no CHECK tying them to final: validating one would read
-- the whole ledger; the reconciler is the only writer of both.

ALTER TABLE usage_reports ADD COLUMN closed_at timestamptz;
ALTER TABLE usage_reports ADD COLUMN closed_by text;

COMMENT ON COLUMN usage_reports.closed_at IS 'When the reconciler marked the row final because its process sent nothing for --close-after past the window''s end (a dead process); NULL: the process sent its final report, or the row is open.';
COMMENT ON COLUMN usage_reports.closed_by IS 'The reconciler that closed the row (its --durable and host); NULL unless closed_at is set.';
COMMENT ON COLUMN usage_reports.final IS 'The process will not report more for this window: it sent its final report, or the reconciler closed the row (closed_at).';

-- The closer finds rows first written behind where its passes have got to
-- (a window's first report comes up to a window after its start; a spool
-- replayed after an outage far later) by first_seen: a BRIN index, which
-- costs the writer almost nothing (see 003), since first_seen follows
-- insertion order. Building it reads the ledger once, under a lock that
-- holds writes back: stop the reconcilers while it runs (reports wait in
-- the stream).
CREATE INDEX usage_reports_first_seen ON usage_reports USING brin (first_seen);

-- The views keep their columns and gain one at the end (CREATE OR REPLACE
-- VIEW may only append), so readers of 007's columns are unaffected.

-- closed_by_reconciler: the window's process rows the reconciler closed.
CREATE OR REPLACE VIEW usage_windows AS
SELECT key,
       window_start,
       max(window_end)                         AS window_end,
       (sum(spent) + sum(charged) - sum(refunded))::bigint AS spent,
       sum(leased)::bigint                     AS leased,
       sum(rejected)::bigint                   AS rejected,
       sum(degraded)::bigint                   AS degraded,
       count(*)::int                           AS processes,
       array_agg(DISTINCT region ORDER BY region) AS regions,
       bool_or(degraded > 0)                   AS is_degraded,
       bool_and(final)                         AS complete,
       bool_or(NOT final AND now() > window_end + usage_final_grace()) AS incomplete,
       sum(spent)::bigint                      AS allowed,
       sum(refunded)::bigint                   AS refunded,
       sum(charged)::bigint                    AS charged,
       count(closed_at)::int                   AS closed_by_reconciler
FROM usage_reports
GROUP BY key, window_start;

COMMENT ON VIEW usage_windows IS 'Usage per key and accounting window. spent (billed) = allowed + charged - refunded. complete: every process sent its final report or was closed by the reconciler (closed_by_reconciler of them); incomplete: a process is overdue.';

-- closed_windows: windows of the bucket with a row the reconciler closed.
CREATE OR REPLACE VIEW usage_by_hour AS
SELECT key,
       date_trunc('hour', window_start, 'UTC') AS hour,
       sum(spent)::bigint    AS spent,
       sum(leased)::bigint   AS leased,
       sum(rejected)::bigint AS rejected,
       sum(degraded)::bigint AS degraded,
       count(*)::int         AS windows,
       count(*) FILTER (WHERE is_degraded)::int AS degraded_windows,
       bool_or(is_degraded)  AS is_degraded,
       bool_and(complete)    AS complete,
       bool_or(incomplete)   AS incomplete,
       sum(allowed)::bigint  AS allowed,
       sum(refunded)::bigint AS refunded,
       sum(charged)::bigint  AS charged,
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int AS closed_windows
FROM usage_windows
GROUP BY key, date_trunc('hour', window_start, 'UTC');

CREATE OR REPLACE VIEW usage_by_day AS
SELECT key,
       date_trunc('day', window_start, 'UTC') AS day,
       sum(spent)::bigint    AS spent,
       sum(leased)::bigint   AS leased,
       sum(rejected)::bigint AS rejected,
       sum(degraded)::bigint AS degraded,
       count(*)::int         AS windows,
       count(*) FILTER (WHERE is_degraded)::int AS degraded_windows,
       bool_or(is_degraded)  AS is_degraded,
       bool_and(complete)    AS complete,
       bool_or(incomplete)   AS incomplete,
       sum(allowed)::bigint  AS allowed,
       sum(refunded)::bigint AS refunded,
       sum(charged)::bigint  AS charged,
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int AS closed_windows
FROM usage_windows
GROUP BY key, date_trunc('day', window_start, 'UTC');

-- Rows the reconciler closed: a process died without its final report, and
-- billed what its last report said. late_report: a report of the process
-- came after the closing and changed the row (its figures are in spent).
CREATE VIEW usage_closed_windows AS
SELECT key, window_start, window_end, process_id, region, spent, leased, refunded, charged, seq,
       updated_at AS last_report_at, closed_at, closed_by, updated_at > closed_at AS late_report
FROM usage_reports
WHERE closed_at IS NOT NULL;

COMMENT ON VIEW usage_closed_windows IS 'Process rows closed by the reconciler (the process sent nothing for --close-after past the window end). late_report: a report came after the closing and was merged.';

---- create above / drop below ----

DROP VIEW usage_closed_windows;
DROP VIEW usage_degraded_windows;
DROP VIEW usage_by_day;
DROP VIEW usage_by_hour;
DROP VIEW usage_windows;

-- The views of 007.
CREATE VIEW usage_windows AS
SELECT key,
       window_start,
       max(window_end)                         AS window_end,
       (sum(spent) + sum(charged) - sum(refunded))::bigint AS spent,
       sum(leased)::bigint                     AS leased,
       sum(rejected)::bigint                   AS rejected,
       sum(degraded)::bigint                   AS degraded,
       count(*)::int                           AS processes,
       array_agg(DISTINCT region ORDER BY region) AS regions,
       bool_or(degraded > 0)                   AS is_degraded,
       bool_and(final)                         AS complete,
       bool_or(NOT final AND now() > window_end + usage_final_grace()) AS incomplete,
       sum(spent)::bigint                      AS allowed,
       sum(refunded)::bigint                   AS refunded,
       sum(charged)::bigint                    AS charged
FROM usage_reports
GROUP BY key, window_start;

COMMENT ON VIEW usage_windows IS 'Usage per key and accounting window. spent (billed) = allowed + charged - refunded. complete: every process sent its final report; incomplete: a process is overdue.';

CREATE VIEW usage_by_hour AS
SELECT key,
       date_trunc('hour', window_start, 'UTC') AS hour,
       sum(spent)::bigint    AS spent,
       sum(leased)::bigint   AS leased,
       sum(rejected)::bigint AS rejected,
       sum(degraded)::bigint AS degraded,
       count(*)::int         AS windows,
       count(*) FILTER (WHERE is_degraded)::int AS degraded_windows,
       bool_or(is_degraded)  AS is_degraded,
       bool_and(complete)    AS complete,
       bool_or(incomplete)   AS incomplete,
       sum(allowed)::bigint  AS allowed,
       sum(refunded)::bigint AS refunded,
       sum(charged)::bigint  AS charged
FROM usage_windows
GROUP BY key, date_trunc('hour', window_start, 'UTC');

CREATE VIEW usage_by_day AS
SELECT key,
       date_trunc('day', window_start, 'UTC') AS day,
       sum(spent)::bigint    AS spent,
       sum(leased)::bigint   AS leased,
       sum(rejected)::bigint AS rejected,
       sum(degraded)::bigint AS degraded,
       count(*)::int         AS windows,
       count(*) FILTER (WHERE is_degraded)::int AS degraded_windows,
       bool_or(is_degraded)  AS is_degraded,
       bool_and(complete)    AS complete,
       bool_or(incomplete)   AS incomplete,
       sum(allowed)::bigint  AS allowed,
       sum(refunded)::bigint AS refunded,
       sum(charged)::bigint  AS charged
FROM usage_windows
GROUP BY key, date_trunc('day', window_start, 'UTC');

CREATE VIEW usage_degraded_windows AS
SELECT key, window_start, window_end, spent, degraded, regions, processes, complete
FROM usage_windows
WHERE is_degraded;

COMMENT ON COLUMN usage_reports.final IS 'The process will not report more for this window.';
DROP INDEX usage_reports_first_seen;
ALTER TABLE usage_reports DROP COLUMN closed_by;
ALTER TABLE usage_reports DROP COLUMN closed_at;
