-- One row per (key, accounting window, limiter process): the latest
-- cumulative report of that process for that window. Reports are cumulative,
-- so a redelivered, duplicated or reordered report is merged with GREATEST
-- (monotone counters) or by seq (leased, which can go down when permits are
-- returned); final sticks once set.
CREATE TABLE usage_reports (
    key          text        NOT NULL,
    window_start timestamptz NOT NULL,
    process_id   text        NOT NULL,
    window_end   timestamptz NOT NULL,
    region       text        NOT NULL,
    spent        bigint      NOT NULL DEFAULT 0 CHECK (spent >= 0),
    leased       bigint      NOT NULL DEFAULT 0,
    rejected     bigint      NOT NULL DEFAULT 0 CHECK (rejected >= 0),
    degraded     bigint      NOT NULL DEFAULT 0 CHECK (degraded >= 0),
    final        boolean     NOT NULL DEFAULT false,
    seq          bigint      NOT NULL,
    sent_at      timestamptz NOT NULL,
    first_seen   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, window_start, process_id)
);

COMMENT ON TABLE usage_reports IS 'Latest cumulative usage per (key, window, process); written only by the reconciler.';
COMMENT ON COLUMN usage_reports.spent IS 'Cost of allowed decisions (exact; what billing charges).';
COMMENT ON COLUMN usage_reports.leased IS 'Net permits taken from the regional store (authorized); leased - spent is over-authorization.';
COMMENT ON COLUMN usage_reports.rejected IS 'Cost of rejected decisions.';
COMMENT ON COLUMN usage_reports.degraded IS 'Cost allowed in degraded mode (part of spent).';
COMMENT ON COLUMN usage_reports.final IS 'The process will not report more for this window.';

CREATE INDEX usage_reports_window_start ON usage_reports (window_start);
CREATE INDEX usage_reports_open ON usage_reports (window_end) WHERE NOT final;

-- How long after window_end a process may still send its final report before
-- its window counts as incomplete. Replace the function to change it.
CREATE FUNCTION usage_final_grace() RETURNS interval
    LANGUAGE sql IMMUTABLE AS $$ SELECT interval '2 minutes' $$;

-- One row per (key, window): all processes and regions added up.
CREATE VIEW usage_windows AS
SELECT key,
       window_start,
       max(window_end)                         AS window_end,
       sum(spent)::bigint                      AS spent,
       sum(leased)::bigint                     AS leased,
       sum(rejected)::bigint                   AS rejected,
       sum(degraded)::bigint                   AS degraded,
       count(*)::int                           AS processes,
       array_agg(DISTINCT region ORDER BY region) AS regions,
       bool_or(degraded > 0)                   AS is_degraded,
       bool_and(final)                         AS complete,
       bool_or(NOT final AND now() > window_end + usage_final_grace()) AS incomplete
FROM usage_reports
GROUP BY key, window_start;

COMMENT ON VIEW usage_windows IS 'Usage per key and accounting window. complete: every process sent its final report; incomplete: a process is overdue.';

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
       bool_or(incomplete)   AS incomplete
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
       bool_or(incomplete)   AS incomplete
FROM usage_windows
GROUP BY key, date_trunc('day', window_start, 'UTC');

-- Windows in which some cost was allowed in degraded mode (store
-- unavailable): enforced approximately, billed exactly.
CREATE VIEW usage_degraded_windows AS
SELECT key, window_start, window_end, spent, degraded, regions, processes, complete
FROM usage_windows
WHERE is_degraded;

-- Processes that never sent a final report for a window, grace included
-- (crashed or killed): their spent may be short of the truth by what they
-- did after their last report.
CREATE VIEW usage_incomplete_windows AS
SELECT key, window_start, window_end, process_id, region, spent, leased, seq,
       updated_at AS last_report_at
FROM usage_reports
WHERE NOT final AND now() > window_end + usage_final_grace();

-- Over-authorization: permits leased from a region's store but not spent.
CREATE VIEW usage_over_authorization AS
SELECT region,
       key,
       window_start,
       sum(leased)::bigint              AS leased,
       sum(spent)::bigint               AS spent,
       (sum(leased) - sum(spent))::bigint AS over_authorized
FROM usage_reports
GROUP BY region, key, window_start;

---- create above / drop below ----

DROP VIEW usage_over_authorization;
DROP VIEW usage_incomplete_windows;
DROP VIEW usage_degraded_windows;
DROP VIEW usage_by_day;
DROP VIEW usage_by_hour;
DROP VIEW usage_windows;
DROP FUNCTION usage_final_grace();
DROP TABLE usage_reports;
