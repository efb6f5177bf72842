-- usage_reports partitioned by month of window_start (UTC), converted in
-- place: the rows of 001/002 are copied into monthly partitions.
--
-- The primary key (key, window_start, process_id) keeps key as its leading
-- column and is the table's only unique key, so the table can be
-- distributed by key (Citus) without changing it; see ledger/README.md.
--
-- Partitions are created by usage_ensure_partition(at), which the
-- reconciler's writer calls for the months of a batch that have none, so an
-- insert for any month, however far in the past or future, finds its
-- partition. usage_detach_partitions(cutoff) and usage_retain_months(n) are
-- the retention: they detach old partitions (and rename them
-- <partition>_detached_<day>_<oid>) for the operator to archive and drop.
--
-- The conversion rewrites the table under an exclusive lock: stop the
-- reconcilers while it runs (reports wait in the stream) and expect billing
-- reads to wait.

DROP VIEW usage_over_authorization;
DROP VIEW usage_incomplete_windows;
DROP VIEW usage_degraded_windows;
DROP VIEW usage_by_day;
DROP VIEW usage_by_hour;
DROP VIEW usage_windows;

ALTER TABLE usage_reports RENAME TO usage_reports_unpartitioned;
ALTER TABLE usage_reports_unpartitioned RENAME CONSTRAINT usage_reports_pkey TO usage_reports_unpartitioned_pkey;
DROP INDEX usage_reports_window_start;
DROP INDEX usage_reports_open;

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
) PARTITION BY RANGE (window_start);

COMMENT ON TABLE usage_reports IS 'Latest cumulative usage per (key, window, process), partitioned by UTC month of window_start; written only by the reconciler.';
COMMENT ON COLUMN usage_reports.spent IS 'Cost of allowed decisions (exact; what billing charges).';
COMMENT ON COLUMN usage_reports.leased IS 'Net permits taken from the regional store (authorized); leased - spent is over-authorization.';
COMMENT ON COLUMN usage_reports.rejected IS 'Cost of rejected decisions.';
COMMENT ON COLUMN usage_reports.degraded IS 'Cost allowed in degraded mode (part of spent).';
COMMENT ON COLUMN usage_reports.final IS 'The process will not report more for this window.';

-- Range queries over all keys (a month's bill for every customer, degraded
-- windows of a day) find their partition by pruning and their pages by
-- this BRIN index: window_start follows insertion order within a month, and
-- a BRIN costs the writer almost nothing where a B-tree cost about a fifth
-- of an insert. (001's partial index on open windows is gone: the views
-- reach open windows by window_start.)
CREATE INDEX usage_reports_window_start ON usage_reports USING brin (window_start);

-- The month partition that holds at, created if missing (fillfactor 85
-- leaves room for the cumulative updates to stay on their page). Safe to
-- call concurrently; creating a partition briefly locks usage_reports, so
-- callers should not hold other locks on it (the writer calls it in a
-- transaction of its own).
CREATE FUNCTION usage_ensure_partition(at timestamptz) RETURNS text
    LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
DECLARE
    lo   timestamptz := date_trunc('month', at);
    hi   timestamptz := date_trunc('month', at) + interval '1 month';
    name text := 'usage_reports_p' || to_char(date_trunc('month', at), 'YYYYMM')
                 || CASE WHEN at < '0001-01-01 00:00:00+00' THEN '_bc' ELSE '' END;
BEGIN
    IF to_regclass(quote_ident(name)) IS NOT NULL THEN
        RETURN name;
    END IF;
    -- One creator at a time; the catalog is read again under the lock (a
    -- query, not to_regclass, whose cache may not have seen the other's).
    PERFORM pg_advisory_xact_lock(hashtext('usage_reports partitions'));
    IF EXISTS (SELECT FROM pg_class WHERE relname = name AND relnamespace = current_schema()::regnamespace) THEN
        RETURN name;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF usage_reports FOR VALUES FROM (%L) TO (%L) WITH (fillfactor = 85)',
                   name, lo, hi);
    RETURN name;
EXCEPTION WHEN duplicate_table THEN
    RETURN name;
END $$;

-- Creates the month partitions for every month from from_at to to_at
-- (inclusive); returns their names. Run ahead of time (e.g. monthly, for
-- the next three months) so that the writer seldom creates one.
CREATE FUNCTION usage_ensure_partitions(from_at timestamptz, to_at timestamptz) RETURNS SETOF text
    LANGUAGE sql SET TimeZone = 'UTC' AS $$
SELECT usage_ensure_partition(m)
FROM generate_series(date_trunc('month', from_at), to_at, interval '1 month') AS m
$$;

-- Retention: detaches every partition of usage_reports whose month ends at
-- or before cutoff, renames it <partition>_detached_<YYYYMMDD>_<oid> (the
-- day of the detach; the oid keeps a month detached twice apart) and
-- returns the new names. The detached tables keep their rows, outside the
-- views, for the operator to archive (pg_dump -t) and drop. A report that
-- comes later for a detached month is written to a new partition.
CREATE FUNCTION usage_detach_partitions(cutoff timestamptz) RETURNS SETOF text
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

-- Retention by age: keeps the current UTC month and the keep_months months
-- before it, detaches the older partitions (usage_detach_partitions).
CREATE FUNCTION usage_retain_months(keep_months int) RETURNS SETOF text
    LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
BEGIN
    IF keep_months IS NULL OR keep_months < 0 THEN
        RAISE EXCEPTION 'usage_retain_months: keep_months must be 0 or more, got %', keep_months;
    END IF;
    RETURN QUERY SELECT usage_detach_partitions(date_trunc('month', now()) - make_interval(months => keep_months));
END $$;

SELECT usage_ensure_partition(m)
FROM (SELECT DISTINCT date_trunc('month', window_start, 'UTC') AS m FROM usage_reports_unpartitioned) AS months;
SELECT usage_ensure_partitions(now(), now() + interval '3 months');

INSERT INTO usage_reports
    (key, window_start, process_id, window_end, region, spent, leased, rejected, degraded, final, seq, sent_at,
     first_seen, updated_at)
SELECT key, window_start, process_id, window_end, region, spent, leased, rejected, degraded, final, seq, sent_at,
       first_seen, updated_at
FROM usage_reports_unpartitioned;

DROP TABLE usage_reports_unpartitioned;

-- The views of 001, unchanged: filters on key and window_start reach the
-- month partitions through them (partition pruning).

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

CREATE TABLE usage_reports_unpartitioned (
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
    updated_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO usage_reports_unpartitioned SELECT
    key, window_start, process_id, window_end, region, spent, leased, rejected, degraded, final, seq, sent_at,
    first_seen, updated_at
FROM usage_reports;
DROP TABLE usage_reports;
DROP FUNCTION usage_retain_months(int);
DROP FUNCTION usage_detach_partitions(timestamptz);
DROP FUNCTION usage_ensure_partitions(timestamptz, timestamptz);
DROP FUNCTION usage_ensure_partition(timestamptz);
ALTER TABLE usage_reports_unpartitioned RENAME TO usage_reports;
ALTER TABLE usage_reports ADD PRIMARY KEY (key, window_start, process_id);
COMMENT ON TABLE usage_reports IS 'Latest cumulative usage per (key, window, process); written only by the reconciler.';
COMMENT ON COLUMN usage_reports.spent IS 'Cost of allowed decisions (exact; what billing charges).';
COMMENT ON COLUMN usage_reports.leased IS 'Net permits taken from the regional store (authorized); leased - spent is over-authorization.';
COMMENT ON COLUMN usage_reports.rejected IS 'Cost of rejected decisions.';
COMMENT ON COLUMN usage_reports.degraded IS 'Cost allowed in degraded mode (part of spent).';
COMMENT ON COLUMN usage_reports.final IS 'The process will not report more for this window.';
CREATE INDEX usage_reports_window_start ON usage_reports (window_start);
CREATE INDEX usage_reports_open ON usage_reports (window_end) WHERE NOT final;

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
