-- Retention that keeps carried credit, and a record of detached months.
--
-- Billing nets refunds with carry-over (ledger/export, Row): a key's
-- negative net is carried into its later periods until used up, and the
-- carry runs over the key's whole history in usage_reports. Detaching a
-- month (usage_detach_partitions, 003) whose end still holds credit not yet
-- used up drops that credit, and the key's later bills rise. So a month is
-- now detached only up to the last month end at which no key holds open
-- credit; the months after it stay attached (kept back) until their credit
-- is used up. usage_retention_holds says which months are kept back and
-- why.
--
-- Credit is measured per hour, the finest period the export bills: a
-- key's open credit at a month end is the carry-over of its hourly nets
-- up to there (max(0, running max of the cumulative net) - cumulative
-- net). When it is 0 the day's and month's carry are 0 too (their periods
-- start at hour starts), so detaching changes no later bill at any of
-- those granularities. (It may keep a month back that only an hourly
-- export needed.)
--
-- Detached months are recorded in usage_detached_months: the reconciler's
-- writer dead-letters a late report for one (reason detached) instead of
-- creating a new, lone partition whose month's export would shrink to it.

CREATE TABLE usage_detached_months (
    month       timestamptz PRIMARY KEY,
    archived    text        NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE usage_detached_months IS 'Months of usage_reports detached by retention (usage_detach_partitions), first instant of the UTC month; the reconciler dead-letters reports for them (reason detached).';
COMMENT ON COLUMN usage_detached_months.archived IS 'Name the detached partition was renamed to, for the operator to archive and drop.';

-- Each key's open carried credit (> 0) at boundary: the carry-over of its
-- hourly nets (spent + charged - refunded) from its first report in
-- usage_reports up to boundary. Reads every attached row before boundary.
CREATE FUNCTION usage_open_credit(boundary timestamptz) RETURNS TABLE (key text, credit numeric)
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

-- The attached partitions of usage_reports with their month bounds.
CREATE FUNCTION usage_partitions() RETURNS TABLE (part regclass, relname text, lower timestamptz, upper timestamptz)
    LANGUAGE sql STABLE SET TimeZone = 'UTC' AS $$
SELECT c.oid::regclass, c.relname::text,
       substring(pg_get_expr(c.relpartbound, c.oid) FROM $re$FROM \('([^']+)'\)$re$)::timestamptz,
       substring(pg_get_expr(c.relpartbound, c.oid) FROM $re$TO \('([^']+)'\)$re$)::timestamptz
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'usage_reports'::regclass
$$;

-- The partitions that usage_detach_partitions(cutoff) keeps back for
-- open credit: those ending at or before cutoff and after the last such
-- month end at which no key holds open credit, each with the keys holding
-- credit at its end and their credit (cost units). Month ends are tried
-- from the latest down, so a run whose cutoff is clean reads the ledger
-- before cutoff once.
CREATE FUNCTION usage_retention_holds(cutoff timestamptz)
    RETURNS TABLE (partition text, month timestamptz, keys bigint, credit numeric)
    LANGUAGE plpgsql STABLE SET TimeZone = 'UTC' AS $$
DECLARE
    p record;
    n bigint;
    c numeric;
BEGIN
    FOR p IN SELECT * FROM usage_partitions() AS u WHERE u.upper <= cutoff ORDER BY u.upper DESC LOOP
        SELECT count(*), coalesce(sum(o.credit), 0) INTO n, c FROM usage_open_credit(p.upper) AS o;
        EXIT WHEN n = 0;
        partition := p.relname; month := p.lower; keys := n; credit := c;
        RETURN NEXT;
    END LOOP;
END $$;

-- Retention: detaches every partition of usage_reports whose month ends at
-- or before cutoff and is not kept back for open credit
-- (usage_retention_holds), renames it <partition>_detached_<YYYYMMDD>_<oid>,
-- records its month in usage_detached_months and returns the new names.
CREATE OR REPLACE FUNCTION usage_detach_partitions(cutoff timestamptz) RETURNS SETOF text
    LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
DECLARE
    p        record;
    held     timestamptz;
    archived text;
BEGIN
    SELECT min(h.month) INTO held FROM usage_retention_holds(cutoff) AS h;
    FOR p IN SELECT * FROM usage_partitions() AS u WHERE u.upper <= cutoff ORDER BY u.upper LOOP
        CONTINUE WHEN held IS NOT NULL AND p.lower >= held;
        EXECUTE format('ALTER TABLE usage_reports DETACH PARTITION %s', p.part);
        archived := p.relname || '_detached_' || to_char(now(), 'YYYYMMDD') || '_' || p.part::oid;
        EXECUTE format('ALTER TABLE %s RENAME TO %I', p.part, archived);
        INSERT INTO usage_detached_months (month, archived) VALUES (p.lower, archived)
        ON CONFLICT (month) DO UPDATE SET archived = EXCLUDED.archived, detached_at = now();
        RETURN NEXT archived;
    END LOOP;
END $$;

-- Sums that cannot overflow (issue 28, item 3). A report's figures are at
-- most reconcile.MaxCounter (2^53-1), but the rows of one key and window
-- are not bounded (late rows, processes), and 2,000 rows at the bound
-- overflowed the views' bigint sums: the key's /v1/usage failed, and the
-- month's export failed for every key. The views now add up in numeric
-- and saturate each figure at the bigint bounds (usage_saturate), with a
-- column overflow that says a figure was saturated: never wrapped, never
-- an error for the other keys.

CREATE FUNCTION usage_saturate(v numeric) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT least(greatest(v, -9223372036854775807), 9223372036854775807)::bigint
$$;

COMMENT ON FUNCTION usage_saturate(numeric) IS 'v as bigint, saturated at ±(2^63-1): the views'' overflow guard.';

-- usage_overflows reports whether any of the sums is beyond ±(2^63-1).
CREATE FUNCTION usage_overflows(VARIADIC v numeric[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT coalesce(bool_or(abs(x) > 9223372036854775807), false) FROM unnest(v) AS x
$$;

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
                       sum(spent), sum(refunded), sum(charged)) AS overflow
FROM usage_reports
GROUP BY key, window_start;

COMMENT ON VIEW usage_windows IS 'Usage per key and accounting window. spent (billed) = allowed + charged - refunded. complete: every process sent its final report or was closed by the reconciler (closed_by_reconciler of them); incomplete: a process is overdue; overflow: a figure passed ±(2^63-1) and is saturated there.';

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
                                            sum(allowed), sum(refunded), sum(charged)) AS overflow
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
                                            sum(allowed), sum(refunded), sum(charged)) AS overflow
FROM usage_windows
GROUP BY key, date_trunc('day', window_start, 'UTC');

CREATE OR REPLACE VIEW usage_over_authorization AS
SELECT region,
       key,
       window_start,
       usage_saturate(sum(leased))               AS leased,
       usage_saturate(sum(spent))                AS spent,
       usage_saturate(sum(leased) - sum(spent))  AS over_authorized
FROM usage_reports
GROUP BY region, key, window_start;

---- create above / drop below ----

-- The views of 009.
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
       sum(charged)::bigint                    AS charged,
       count(closed_at)::int                   AS closed_by_reconciler
FROM usage_reports
GROUP BY key, window_start;

COMMENT ON VIEW usage_windows IS 'Usage per key and accounting window. spent (billed) = allowed + charged - refunded. complete: every process sent its final report or was closed by the reconciler (closed_by_reconciler of them); incomplete: a process is overdue.';

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
       sum(charged)::bigint  AS charged,
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int AS closed_windows
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
       sum(charged)::bigint  AS charged,
       count(*) FILTER (WHERE closed_by_reconciler > 0)::int AS closed_windows
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

DROP FUNCTION usage_overflows(numeric[]);
DROP FUNCTION usage_saturate(numeric);

-- The retention of 003.
CREATE OR REPLACE FUNCTION usage_detach_partitions(cutoff timestamptz) RETURNS SETOF text
    LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
DECLARE
    p        record;
    archived text;
BEGIN
    FOR p IN
        SELECT c.oid::regclass AS part, c.relname,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM $re$TO \('([^']+)'\)$re$)::timestamptz AS upper
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'usage_reports'::regclass
        ORDER BY 3
    LOOP
        CONTINUE WHEN p.upper > cutoff;
        EXECUTE format('ALTER TABLE usage_reports DETACH PARTITION %s', p.part);
        archived := p.relname || '_detached_' || to_char(now(), 'YYYYMMDD') || '_' || p.part::oid;
        EXECUTE format('ALTER TABLE %s RENAME TO %I', p.part, archived);
        RETURN NEXT archived;
    END LOOP;
END $$;

DROP FUNCTION usage_retention_holds(timestamptz);
DROP FUNCTION usage_partitions();
DROP FUNCTION usage_open_credit(timestamptz);
DROP TABLE usage_detached_months;
