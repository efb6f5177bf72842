package sink_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// TestBillingScale measures an incremental continuous pass on a ledger of
// QUOTA_BILLING_KEYS keys (default 100,000) × QUOTA_BILLING_DAYS days
// (default 30) of hourly rows, one row per key and hour, on a private
// Postgres server: one idle pass, then one pass after 1 % of the keys'
// last hour changed. The sink's records are seeded as continuous passes
// would have left them (every hour of the last four days sent and
// acknowledged, the checkpoint after the seed). It reports the seeding time, and each pass's wall time
// and queries (docs/performance.md). Opt-in: QUOTA_BILLING_SCALE=1 (make
// bench-billing); it fails when the idle pass takes over 10 s or 100
// queries, or the changed pass over 60 s.
func TestBillingScale(t *testing.T) {
	if os.Getenv("QUOTA_BILLING_SCALE") == "" {
		t.Skip("set QUOTA_BILLING_SCALE=1 to run (make bench-billing)")
	}
	keys, days := envInt(t, "QUOTA_BILLING_KEYS", 100_000), envInt(t, "QUOTA_BILLING_DAYS", 30)
	e, log := incrementalEnv(t)
	ctx := context.Background()
	hours := days * 24
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	first := end.Add(-time.Duration(hours) * time.Hour)
	name := "scale"
	// The sink's records of the last four days: an hourly pass reads
	// back three (DefaultHourLookback); older ones it never reads.
	eventHours := 4 * 24
	began := time.Now()
	for m := first; m.Before(end.AddDate(0, 1, 0)); m = m.AddDate(0, 1, 0) {
		if _, err := e.pool.Exec(ctx, `SELECT usage_ensure_partition($1)`, m); err != nil {
			t.Fatal(err)
		}
	}
	// The seed writes rows as ingestion leaves them, but builds the B-tree
	// indexes once after the rows instead of row by row: inserting hour by
	// hour into a primary key led by key touches a random leaf per row,
	// about 29,000 rows/s on the shared 2-core machine, 45 minutes for
	// 100k keys × 30 days. The indexes are dropped and built again from
	// their own definitions, and the test checks that every index of the
	// tables and their partitions is as before.
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Sorting 72 M keys in the default 64 MB spills to disk many times.
	if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '512MB'`); err != nil {
		t.Fatal(err)
	}
	tables := []string{"usage_reports", "billing_sink_events"}
	var indexes []btreeIndex
	before := map[string][]string{}
	for _, table := range tables {
		before[table] = indexDefinitions(ctx, t, conn, table)
		indexes = append(indexes, dropBtreeIndexes(ctx, t, conn, table)...)
	}
	// Hour by hour, every key: the order the reconciler writes them in, so
	// a key's history lies on as many pages as after real ingestion. One
	// hour a statement (its own transaction, so its own changed_xid, as the
	// reconciler's batches have) bounds the private server's work.
	// spent = 1 + (key + hour) % 5.
	for h := range hours {
		if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, final, seq, sent_at)
SELECT 'key_' || lpad(k::text, 6, '0'), $1::timestamptz, 'p1', $2::timestamptz, 'eu', 1 + (k + $3) % 5, true, 1, $2::timestamptz
FROM generate_series(1, $4) k`, first.Add(time.Duration(h)*time.Hour), first.Add(time.Duration(h+1)*time.Hour), h, keys); err != nil {
			t.Fatal(err)
		}
	}
	seededRows := time.Since(began)
	for h := max(0, hours-eventHours); h < hours; h++ {
		if _, err := conn.Exec(ctx, `INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision,
    event_id, billed, rejected, degraded, acked_billed, data, status, attempts, sent_at, first_attempt_at, maybe_stored)
SELECT $3, 'key_' || lpad(k::text, 6, '0'), $1::timestamptz, 'hour', $2::timestamptz, 0, 'seed-' || k || '-' || $4::int, 1 + (k + $4::int) % 5, 0, 0,
       1 + (k + $4::int) % 5, jsonb_build_object('spent', 1 + (k + $4::int) % 5, 'refunded', 0, 'charged', 0, 'carried_in', 0), 'sent', 1,
       $2::timestamptz, $2::timestamptz, false
FROM generate_series(1, $5) k`, first.Add(time.Duration(h)*time.Hour), first.Add(time.Duration(h+1)*time.Hour), name, h, keys); err != nil {
			t.Fatal(err)
		}
	}
	seededEvents := time.Since(began)
	for _, ix := range indexes {
		if _, err := conn.Exec(ctx, ix.create); err != nil {
			t.Fatalf("rebuild %s: %v", ix.name, err)
		}
	}
	for _, table := range tables {
		if after := indexDefinitions(ctx, t, conn, table); !slices.Equal(after, before[table]) {
			t.Fatalf("%s: indexes after the seed\n%s\nwant\n%s", table, strings.Join(after, "\n"), strings.Join(before[table], "\n"))
		}
	}
	seededLedger := time.Since(began)
	at := end.Add(30 * time.Minute)
	if _, err := e.pool.Exec(ctx, `INSERT INTO billing_sinks (sink, granularity, calendar, customer_rule, checkpoint_xid, checked_at, plans_digest)
VALUES ($1, 'hour', 'utc', 'key', pg_snapshot_xmin(pg_current_snapshot()), $2, '')`, name, at.Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Each key's carries as November's hourly passes left them (migration
	// 021): at their reach, 2026-10-31 (or the first hour seeded), and at
	// the last one's now less the lookback, 2026-11-27 23:00, where
	// December's passes start. The rows are all positive, so the low is 0
	// and the billed the net: the net of hours [0, n) of key k is
	// n + 10 (n / 5) + Σ_{j < n % 5} (k + j) % 5. Checked below against a
	// full read.
	reach := time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC)
	if first.After(reach) {
		reach = first
	}
	ahead := time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC)
	for _, c := range []struct{ valid, at time.Time }{{time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC), reach}, {ahead, ahead}} {
		if c.at.Before(first) {
			continue
		}
		n := int(c.at.Sub(first) / time.Hour)
		if _, err := e.pool.Exec(ctx, `INSERT INTO billing_sink_carries (sink, key, valid_from, carried_at, granularity, calendar, cum_net, low, cum_billed)
SELECT $1, 'key_' || lpad(k::text, 6, '0'), $2, $3, 'hour', 'utc', s.net, 0, s.net
FROM generate_series(1, $4) k
CROSS JOIN LATERAL (SELECT $5::bigint + 10 * ($5::bigint / 5) + coalesce(sum((k + j) % 5), 0) AS net
                    FROM generate_series(0, $5::int % 5 - 1) j) s`, name, c.valid, c.at, keys, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		t.Fatal(err)
	}
	seeded := time.Since(began)
	fmt.Printf("billing-scale keys=%d days=%d rows=%d seeded_seconds=%.0f rows_seconds=%.0f rows_per_second=%.0f events_seconds=%.0f indexes_seconds=%.0f vacuum_seconds=%.0f\n",
		keys, days, keys*hours, seeded.Seconds(), seededRows.Seconds(), float64(keys*hours)/seededRows.Seconds(),
		(seededEvents - seededRows).Seconds(), (seededLedger - seededEvents).Seconds(), (seeded - seededLedger).Seconds())

	rc, s, _ := httpSink(t)
	// The daemon's billing pool bounds statements by its own flag; on a
	// machine shared with other work a page's 5 s default is too short to
	// measure.
	cfg := export.DefaultConfig()
	cfg.StatementTimeout = time.Minute
	ex, err := export.New(e.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sink.NewPublisher(e.pool, ex, s, sink.Config{Sink: name, Granularity: export.Hour, Incremental: true})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(what string, limit time.Duration, maxQueries int, wantRead, wantCorrections int) {
		t.Helper()
		log.reset()
		began := time.Now()
		g := export.Hour
		st, err := p.Run(ctx, export.Month.Start(at), g.Next(g.Start(at)), at)
		took := time.Since(began)
		queries := len(log.reset())
		load, _ := os.ReadFile("/proc/loadavg")
		fmt.Printf("billing-scale keys=%d days=%d rows=%d pass=%s seconds=%.2f queries=%d keys_read=%d corrections=%d load=%s\n",
			keys, days, keys*hours, what, took.Seconds(), queries, st.KeysRead, st.Corrections, strings.Fields(string(load) + " ?")[0])
		if err != nil || st.KeysRead != wantRead || st.Corrections != wantCorrections || st.KeysDiffering != 0 {
			t.Fatalf("%s pass: %+v, %v; want %d keys read, %d corrections", what, st, err, wantRead, wantCorrections)
		}
		if took > limit || (maxQueries > 0 && queries > maxQueries) {
			t.Errorf("%s pass: %v and %d queries, over %v or %d", what, took, queries, limit, maxQueries)
		}
	}
	// The seeded carries are what a full read gives.
	for _, k := range []int{1, keys / 2, keys} {
		if ahead.Before(first) {
			break
		}
		key := fmt.Sprintf("key_%06d", k)
		var want export.Carried
		if err := e.pool.QueryRow(ctx, `SELECT cum_net, low, cum_billed, true FROM billing_sink_carries
WHERE sink = $1 AND key = $2 AND valid_from = $3`, name, key, ahead).Scan(&want.CumNet, &want.Low, &want.CumBilled, &want.Exact); err != nil {
			t.Fatal(err)
		}
		q := export.Query{From: ahead, To: end, Granularity: export.Hour, Now: at, Keys: []string{key}}
		var got []export.Carried
		if err := ex.Export(ctx, q, func(rows []export.Row) error {
			got = append(got, rows[0].Before)
			return nil
		}); err != nil || len(got) != 1 || got[0] != want {
			t.Fatalf("%s: a full read carries %+v into %s, %v; seeded %+v", key, got, ahead, err, want)
		}
	}
	pass("idle", 10*time.Second, 100, 0, 0)
	changed := keys / 100
	if _, err := e.pool.Exec(ctx, `UPDATE usage_reports SET spent = spent + 1
WHERE key IN (SELECT 'key_' || lpad((k * 100)::text, 6, '0') FROM generate_series(1, $1) k) AND window_start = $2`,
		changed, end.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	pass("changed", 60*time.Second, 0, changed, changed)
	if _, distinct := rc.counts(); distinct != changed {
		t.Fatalf("%d events delivered, want %d", distinct, changed)
	}
}

// A btreeIndex is a B-tree index of a table (its partitions' follow it)
// and the statement that creates it again.
type btreeIndex struct {
	name, create string
}

// dropBtreeIndexes drops table's B-tree indexes, the primary key's
// included, and returns how to create them again. The BRIN indexes stay:
// a row costs them little.
func dropBtreeIndexes(ctx context.Context, t *testing.T, conn *pgxpool.Conn, table string) []btreeIndex {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT i.indexrelid::regclass::text, c.conname, pg_get_indexdef(i.indexrelid),
    pg_get_constraintdef(c.oid)
FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_am a ON a.oid = x.relam
LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
WHERE i.indrelid = $1::regclass AND a.amname = 'btree' ORDER BY 1`, table)
	if err != nil {
		t.Fatal(err)
	}
	type found struct {
		index                   string
		constraint, def, condef *string
	}
	var all []found
	for rows.Next() {
		var f found
		if err := rows.Scan(&f.index, &f.constraint, &f.def, &f.condef); err != nil {
			t.Fatal(err)
		}
		all = append(all, f)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var out []btreeIndex
	for _, f := range all {
		drop, create := "DROP INDEX "+f.index, strings.Replace(*f.def, " ON ONLY ", " ON ", 1)
		if f.constraint != nil {
			drop = fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s", table, *f.constraint)
			create = fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s", table, *f.constraint, *f.condef)
		}
		if _, err := conn.Exec(ctx, drop); err != nil {
			t.Fatalf("%s: %v", drop, err)
		}
		out = append(out, btreeIndex{name: f.index, create: create})
	}
	return out
}

// indexDefinitions lists every index of table and of its partitions, with
// the constraint each backs.
func indexDefinitions(ctx context.Context, t *testing.T, conn *pgxpool.Conn, table string) []string {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT pg_get_indexdef(i.indexrelid) || coalesce(' / ' || c.conname || ' ' || pg_get_constraintdef(c.oid), '')
FROM pg_partition_tree($1::regclass) p JOIN pg_index i ON i.indrelid = p.relid
LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
ORDER BY 1`, table)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s: want a positive integer, got %q", name, v)
	}
	return n
}
