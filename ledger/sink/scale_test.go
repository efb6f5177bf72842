package sink_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

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
	// Hour by hour, every key: the order the reconciler writes them in.
	// spent = 1 + (key + hour) % 5.
	if _, err := e.pool.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, final, seq, sent_at)
SELECT 'key_' || lpad(k::text, 6, '0'), $1::timestamptz + h * interval '1 hour', 'p1',
       $1::timestamptz + (h + 1) * interval '1 hour', 'eu', 1 + (k + h) % 5, true, 1, $1::timestamptz + (h + 1) * interval '1 hour'
FROM generate_series(0, $2 - 1) h, generate_series(1, $3) k`, first, hours, keys); err != nil {
		t.Fatal(err)
	}
	seededLedger := time.Since(began)
	if _, err := e.pool.Exec(ctx, `INSERT INTO billing_sink_events (sink, key, period_start, granularity, period_end, revision,
    event_id, spent, rejected, degraded, acked_spent, data, status, attempts, sent_at, first_attempt_at, maybe_stored)
SELECT $4, 'key_' || lpad(k::text, 6, '0'), $1::timestamptz + h * interval '1 hour', 'hour',
       $1::timestamptz + (h + 1) * interval '1 hour', 0, 'seed-' || k || '-' || h, 1 + (k + h) % 5, 0, 0, 1 + (k + h) % 5,
       jsonb_build_object('spent', 1 + (k + h) % 5, 'refunded', 0, 'charged', 0, 'carried_in', 0), 'sent', 1,
       $1::timestamptz + (h + 1) * interval '1 hour', $1::timestamptz + (h + 1) * interval '1 hour', false
FROM generate_series(greatest(0, $2::int - $5::int), $2::int - 1) h, generate_series(1, $3) k`, first, hours, keys, name, eventHours); err != nil {
		t.Fatal(err)
	}
	at := end.Add(30 * time.Minute)
	if _, err := e.pool.Exec(ctx, `INSERT INTO billing_sinks (sink, granularity, calendar, customer_rule, checkpoint_xid, checked_at, plans_digest)
VALUES ($1, 'hour', 'utc', 'key', pg_snapshot_xmin(pg_current_snapshot()), $2, '')`, name, at.Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		t.Fatal(err)
	}
	seeded := time.Since(began)
	fmt.Printf("billing-scale keys=%d days=%d rows=%d seeded_seconds=%.0f ledger_seconds=%.0f\n", keys, days, keys*hours,
		seeded.Seconds(), seededLedger.Seconds())

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
