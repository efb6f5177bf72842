-- Refunds and post-hoc charges (docs/design.md [idempotency]): each report
-- carries the cost its process gave back by refunds (POST /v1/refund) and
-- took by post-hoc charges (POST /v1/charge) in the window, beside spent.
-- Reports from before them write 0.
--
-- The views bill net of refunds: their spent is allowed + charged -
-- refunded, where allowed is the cost of allowed decisions (the table's
-- spent), and they show the three apart. A refund lands in the window it
-- was made in, which need not be its check's: one window's spent may be
-- negative, a key's sum over its checks' windows is not.

ALTER TABLE usage_reports ADD COLUMN refunded bigint NOT NULL DEFAULT 0 CHECK (refunded >= 0);
ALTER TABLE usage_reports ADD COLUMN charged bigint NOT NULL DEFAULT 0 CHECK (charged >= 0);

COMMENT ON COLUMN usage_reports.refunded IS 'Cost given back by refunds (POST /v1/refund) in the window; billing subtracts it from spent.';
COMMENT ON COLUMN usage_reports.charged IS 'Cost taken by post-hoc charges (POST /v1/charge) in the window, not part of spent; billing adds it.';
COMMENT ON COLUMN usage_reports.spent IS 'Cost of allowed decisions (exact). Billing charges spent + charged - refunded: the views'' spent.';

DROP VIEW usage_over_authorization;
DROP VIEW usage_degraded_windows;
DROP VIEW usage_by_day;
DROP VIEW usage_by_hour;
DROP VIEW usage_windows;

-- One row per (key, window): all processes and regions added up. spent is
-- what billing charges: allowed + charged - refunded.
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

-- Over-authorization: permits leased from a region's store but not spent
-- by decisions (post-hoc charges take no permits).
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
DROP VIEW usage_degraded_windows;
DROP VIEW usage_by_day;
DROP VIEW usage_by_hour;
DROP VIEW usage_windows;

-- The views of 003.
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

CREATE VIEW usage_degraded_windows AS
SELECT key, window_start, window_end, spent, degraded, regions, processes, complete
FROM usage_windows
WHERE is_degraded;

CREATE VIEW usage_over_authorization AS
SELECT region,
       key,
       window_start,
       sum(leased)::bigint              AS leased,
       sum(spent)::bigint               AS spent,
       (sum(leased) - sum(spent))::bigint AS over_authorized
FROM usage_reports
GROUP BY region, key, window_start;

COMMENT ON COLUMN usage_reports.spent IS 'Cost of allowed decisions (exact; what billing charges).';
ALTER TABLE usage_reports DROP COLUMN charged;
ALTER TABLE usage_reports DROP COLUMN refunded;
