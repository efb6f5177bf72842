package quotabase_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/quotabase/pgledger"
)

// BenchmarkQuotaBase measures one request's round trip, Client to Server
// over an in-process NATS and back, with its query, against a ledger of
// QUOTABASE_BENCH_KEYS keys (default 10,000) × 3 regions × 60 windows, one
// window every 12 hours from 16 November: a request for November reads a
// key's 30 windows × 3 regions in one month partition.
//
//	go test -run XXX -bench QuotaBase -benchtime 3000x ./ledger/quotabase/
func BenchmarkQuotaBase(b *testing.B) {
	keys := 10_000
	if v := os.Getenv("QUOTABASE_BENCH_KEYS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("QUOTABASE_BENCH_KEYS=%q: want a positive number", v)
		}
		keys = n
	}
	url := ledgertest.MigratedDatabase(b)
	cfg := quotabase.DefaultConfig()
	pool := ledgerPool(b, url, cfg)
	ctx := context.Background()
	loaded := time.Now()
	w := writerPool(b, url)
	if _, err := w.Exec(ctx, `SELECT usage_ensure_partitions('2026-11-01', '2026-12-31')`); err != nil {
		b.Fatal(err)
	}
	_, err := w.Exec(ctx, `
INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, leased, final, seq, sent_at)
SELECT 'acct_' || k, ws, r || '-1@a', ws + interval '1 minute', r, 3, 3, true, 1, ws + interval '1 minute'
FROM generate_series(1, $1::int) AS k,
     generate_series(timestamptz '2026-11-16T00:00:00Z', timestamptz '2026-11-16T00:00:00Z' + interval '12 hours' * 59, interval '12 hours') AS ws,
     unnest(ARRAY['ap', 'eu', 'us']) AS r`, keys)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.Exec(ctx, `ANALYZE usage_reports`); err != nil {
		b.Fatal(err)
	}
	// The plan: one month partition, one index range on the key.
	rows, err := w.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+pgledger.Query, "acct_1", utc("2026-11-01T00:00:00Z"), utc("2026-12-01T00:00:00Z"))
	if err != nil {
		b.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "usage_reports_p202611") || strings.Contains(text, "usage_reports_p202612") || !strings.Contains(text, "Index") {
		b.Fatalf("the query is not pruned to one partition's index:\n%s", text)
	}
	b.Logf("plan:\n%s", text)
	b.Logf("ledger: %d keys × 3 regions × 60 windows = %d rows, loaded in %v", keys, keys*180, time.Since(loaded).Round(time.Millisecond))

	nc := connect(b, natsServer(b))
	startServer(b, nc, pool, cfg)
	client := newClient(b, nc, 5*time.Second)
	start := utc("2026-11-01T00:00:00Z")
	end := start.AddDate(0, 1, 0)
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("acct_%d", i+1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() { // b.Loop: the ledger above is loaded once, not once per b.N
		i++
		base, err := client.QuotaBase(ctx, names[(i*7919)%keys], start, end)
		if err != nil {
			b.Fatal(err)
		}
		if base.Total != 30*3*3 {
			b.Fatalf("total %d, want %d", base.Total, 30*3*3)
		}
	}
}
