-- The region is part of usage_reports' primary key: (key, window_start,
-- region, process_id). A limiter's credentials publish only on its own
-- region's subjects, and the reconciler refuses a report whose region is
-- not its subject's, so every report is its region's; with the region in
-- the key, a report that names another region's process (the process ID
-- is the publisher's word) makes a row of its own region and never merges
-- into the other region's row (issue 28: ap's forged seq 2^62, final,
-- refunded 1,000,000 used to win over eu's later report).
--
-- Existing rows are unique on (key, window_start, process_id), so they
-- are unique on the new key too: nothing is rewritten. The key stays led by
-- key (a distribution column for Citus) and holds window_start (the
-- partition key, which a partitioned table's unique key must include).
-- Dropping and adding the key on the partitioned table drops and builds
-- the unique index of every partition, under an exclusive lock on the
-- table: stop the reconcilers while it runs (reports wait in the stream)
-- and expect billing reads to wait. Measured on the 2-core dev machine:
-- 2.6-3.1 s for 2,000,000 rows in three month partitions (500 MB). Partitions created after it
-- (usage_ensure_partition) take the new key from the parent; partitions
-- detached by retention keep the old one.
ALTER TABLE usage_reports DROP CONSTRAINT usage_reports_pkey;
ALTER TABLE usage_reports ADD CONSTRAINT usage_reports_pkey PRIMARY KEY (key, window_start, region, process_id);

COMMENT ON TABLE usage_reports IS 'Latest cumulative usage per (key, window, region, process), partitioned by UTC month of window_start; written only by the reconciler.';

---- create above / drop below ----

-- Going down merges nothing: it refuses while two regions have rows for
-- one (key, window, process), which the old key cannot hold apart.
DO $$
DECLARE
    n bigint;
BEGIN
    SELECT count(*) INTO n FROM (
        SELECT 1 FROM usage_reports GROUP BY key, window_start, process_id HAVING count(*) > 1) AS shared;
    IF n > 0 THEN
        RAISE EXCEPTION 'usage_reports: % (key, window_start, process_id) rows are held by more than one region; the key without region cannot hold them', n;
    END IF;
END $$;
ALTER TABLE usage_reports DROP CONSTRAINT usage_reports_pkey;
ALTER TABLE usage_reports ADD CONSTRAINT usage_reports_pkey PRIMARY KEY (key, window_start, process_id);

COMMENT ON TABLE usage_reports IS 'Latest cumulative usage per (key, window, process), partitioned by UTC month of window_start; written only by the reconciler.';
