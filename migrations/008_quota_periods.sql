-- Billing by period (docs/design.md [quotas]): the catalogue's plans and
-- key assignments, mirrored into the ledger by the reconciler
-- (ledger/planmirror), and each quota's period, limit, used and remaining
-- answered in SQL.
--
-- The mirror writes a row per catalogue entry with the bucket revision of
-- the value it holds, and changes a row only for a later revision: it is
-- idempotent, may be written by several reconcilers, and never goes
-- backwards. A deleted entry stays as a tombstone (deleted, with the
-- revision of its deletion), so that an older put replayed later cannot
-- bring it back.

CREATE TABLE quota_plans (
    name       text        PRIMARY KEY,
    -- [{"period":"month","limit":1000000}, …], shortest period first,
    -- as region.Plan.QuotaList orders them; [] for a plan without quotas.
    quotas     jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(quotas) = 'array'),
    time_zone  text        NOT NULL DEFAULT '',            -- IANA; '' is UTC
    anchor_day int         NOT NULL DEFAULT 0 CHECK (anchor_day BETWEEN 0 AND 31), -- 0 is the 1st
    deleted    boolean     NOT NULL DEFAULT false,
    revision   bigint      NOT NULL CHECK (revision >= 0), -- catalogue bucket revision of this row's value
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE quota_plans IS 'The catalogue''s plans (quota fields only), mirrored by the reconciler; a row changes only for a later bucket revision. deleted: a tombstone.';

CREATE TABLE quota_key_plans (
    key        text        PRIMARY KEY,
    plan       text,                                       -- NULL once deleted
    deleted    boolean     NOT NULL DEFAULT false,
    revision   bigint      NOT NULL CHECK (revision >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (deleted OR plan IS NOT NULL)
);

COMMENT ON TABLE quota_key_plans IS 'The catalogue''s key → plan assignments, mirrored by the reconciler; a key without a live row uses the plan named default.';

-- The zone's UTC offset at an instant, in seconds (east positive).
CREATE FUNCTION quota_zone_offset(at timestamptz, zone text) RETURNS bigint
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT extract(epoch FROM (at AT TIME ZONE zone) - (at AT TIME ZONE 'UTC'))::bigint
$$;

-- The first instant of local day d in zone, as period/period.go's midnight
-- computes it: the wall clock 00:00 placed with the offset Go's time.Date
-- picks (the offset in force at wall − offset(wall), the wall read as UTC),
-- moved to the jump where the zone's clock jumps over midnight
-- (America/Santiago goes from 24:00 to 01:00).
CREATE FUNCTION quota_midnight(d date, zone text) RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE AS $$
DECLARE
    wall timestamptz := d::timestamp AT TIME ZONE 'UTC';
    t    timestamptz;
    lt   timestamp;
BEGIN
    t := wall - make_interval(secs => quota_zone_offset(wall - make_interval(secs => quota_zone_offset(wall, zone)), zone));
    lt := t AT TIME ZONE zone;
    IF lt::date <> d THEN
        -- hours, not days: an absolute duration, whatever the session's zone
        t := t + interval '24 hours' - (lt - date_trunc('day', lt));
    END IF;
    RETURN t;
END
$$;

-- The anchor day of month m of year y (m may be outside 1..12), at 00:00
-- in zone; in a month shorter than the anchor, its last day.
CREATE FUNCTION quota_month_start(y int, m int, anchor_day int, zone text) RETURNS timestamptz
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT quota_midnight(f.first + (least(CASE WHEN anchor_day < 1 THEN 1 ELSE least(anchor_day, 31) END,
                                              (f.first + interval '1 month')::date - f.first) - 1), zone)
    FROM (SELECT (make_date(y, 1, 1) + make_interval(months => m - 1))::date AS first) f
$$;

-- The period of unit ('hour', 'day', 'week' (ISO, from Monday) or
-- 'month') that instant at falls in, [period_start, period_end), on the
-- calendar of zone (IANA; '' is UTC) with months starting on anchor_day
-- (1 to 31; 0 is the 1st): exactly period.Calendar.Bounds
-- (TestPeriodBoundsMatchGo). An unknown unit gives NULLs.
CREATE FUNCTION quota_period_bounds(unit text, zone text, anchor_day int, at timestamptz,
                                    OUT period_start timestamptz, OUT period_end timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    z    text := coalesce(nullif(zone, ''), 'UTC');
    ld   date;
    off  bigint;
    sec  bigint;
    back int;
    y    int;
    m    int;
BEGIN
    IF at IS NULL THEN
        RETURN;
    END IF;
    ld := (at AT TIME ZONE z)::date;
    CASE unit
    WHEN 'hour' THEN
        -- The zone's clock hour: offsets of whole quarter hours (+5:30,
        -- +5:45) start their hours off the UTC hour.
        off := quota_zone_offset(at, z);
        sec := floor(extract(epoch FROM at))::bigint + off;
        period_start := to_timestamp(sec - (((sec % 3600) + 3600) % 3600) - off);
        period_end := period_start + interval '1 hour';
    WHEN 'day' THEN
        period_start := quota_midnight(ld, z);
        period_end := quota_midnight(ld + 1, z);
    WHEN 'week' THEN
        back := extract(isodow FROM ld)::int - 1;
        period_start := quota_midnight(ld - back, z);
        period_end := quota_midnight(ld - back + 7, z);
    WHEN 'month' THEN
        y := extract(year FROM ld)::int;
        m := extract(month FROM ld)::int;
        period_start := quota_month_start(y, m, coalesce(anchor_day, 0), z);
        IF at < period_start THEN
            period_end := period_start;
            period_start := quota_month_start(y, m - 1, coalesce(anchor_day, 0), z);
        ELSE
            period_end := quota_month_start(y, m + 1, coalesce(anchor_day, 0), z);
        END IF;
    ELSE
        RETURN;
    END CASE;
END
$$;

-- The plan of a key as the catalogue resolves it: its live assignment,
-- else the plan named default. plan_found: the plan is in quota_plans
-- (otherwise time_zone, anchor_day and quotas are empty); plan is NULL for
-- a key with no assignment while there is no default plan.
CREATE FUNCTION quota_key_plan(key text)
RETURNS TABLE (plan text, assigned boolean, plan_found boolean, time_zone text, anchor_day int, quotas jsonb)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN a.plan IS NOT NULL OR p.name IS NOT NULL THEN coalesce(a.plan, 'default') END,
           a.plan IS NOT NULL,
           p.name IS NOT NULL,
           coalesce(p.time_zone, ''),
           coalesce(p.anchor_day, 0),
           coalesce(p.quotas, '[]'::jsonb)
    FROM (SELECT (SELECT kp.plan FROM quota_key_plans kp WHERE kp.key = $1 AND NOT kp.deleted) AS plan) a
    LEFT JOIN quota_plans p ON p.name = coalesce(a.plan, 'default') AND NOT p.deleted
$$;

-- Each quota of key's plan at instant at: its period [period_start,
-- period_end) on the plan's calendar, its limit, what was used in it and
-- what remains (max(0, limit − used)), shortest period first (ord from 1).
-- used is what billing charges (allowed + charged − refunded, migration
-- 007) summed over the windows that start in the period: the sum
-- ledger/quotabase answers quota bases with. Each sum is one index range on
-- usage_reports' primary key (key, window_start, …) in the month
-- partitions the period's bounds prune to.
CREATE FUNCTION quota_usage(key text, at timestamptz)
RETURNS TABLE (plan text, time_zone text, anchor_day int, ord int, period text,
               period_start timestamptz, period_end timestamptz, quota_limit bigint, used bigint, remaining bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT kp.plan, kp.time_zone, kp.anchor_day, q.ord::int, q.period, b.period_start, b.period_end,
           q.quota_limit, u.used, greatest(q.quota_limit - u.used, 0)
    FROM quota_key_plan($1) kp
    CROSS JOIN LATERAL ROWS FROM (jsonb_to_recordset(kp.quotas) AS (period text, "limit" bigint))
        WITH ORDINALITY AS q(period, quota_limit, ord)
    CROSS JOIN LATERAL quota_period_bounds(q.period, kp.time_zone, kp.anchor_day, $2) b
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(r.spent + r.charged - r.refunded), 0)::bigint AS used
        FROM usage_reports r
        WHERE r.key = $1 AND r.window_start >= b.period_start AND r.window_start < b.period_end
    ) u
    ORDER BY q.ord
$$;

COMMENT ON FUNCTION quota_usage(text, timestamptz) IS 'Each quota of the key''s plan at an instant: period, bounds, limit, used (allowed + charged - refunded in the windows starting in the period) and remaining.';

---- create above / drop below ----

DROP FUNCTION quota_usage(text, timestamptz);
DROP FUNCTION quota_key_plan(text);
DROP FUNCTION quota_period_bounds(text, text, int, timestamptz);
DROP FUNCTION quota_month_start(int, int, int, text);
DROP FUNCTION quota_midnight(date, text);
DROP FUNCTION quota_zone_offset(timestamptz, text);
DROP TABLE quota_key_plans;
DROP TABLE quota_plans;
