-- 016: a key's quota figure floors each row's net at zero, as the quota
-- base does (ledger/quotabase): a refund above a row's spend (a forged
-- report, or one written before the reconciler cut such refunds) can no
-- longer make /v1/usage/quotas report less used than was spent elsewhere.
-- Sums are taken in numeric and saturated instead of overflowing.

CREATE OR REPLACE FUNCTION quota_usage(key text, at timestamptz)
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
        SELECT usage_saturate(coalesce(sum(greatest(r.spent::numeric + r.charged - r.refunded, 0)), 0)) AS used
        FROM usage_reports r
        WHERE r.key = $1 AND r.window_start >= b.period_start AND r.window_start < b.period_end
    ) u
    ORDER BY q.ord
$$;

COMMENT ON FUNCTION quota_usage(text, timestamptz) IS 'Each quota of the key''s plan at an instant: period, bounds, limit, used (allowed + charged - refunded in the windows starting in the period, each row floored at zero) and remaining.';

---- create above / drop below ----

CREATE OR REPLACE FUNCTION quota_usage(key text, at timestamptz)
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
