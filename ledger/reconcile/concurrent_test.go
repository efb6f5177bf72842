package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// Two writers, each with its own pool (two reconcilers), merge the same rows
// at the same time, one in ascending and one in descending order, round
// after round; each round also brings a month that has no partition yet,
// which both create on demand. No write may fail (a deadlock is SQLSTATE
// 40P01), and every row must end with the greatest figures of all rounds.
// Each writer writes a batch in one transaction, or in three parts at once
// (WriterConfig.Parallel): six transactions then share rows.
func TestConcurrentWritersDoNotDeadlock(t *testing.T) {
	for _, parallel := range []int{1, 3} {
		t.Run(fmt.Sprintf("parallel=%d", parallel), func(t *testing.T) { testConcurrentWriters(t, parallel) })
	}
}

func testConcurrentWriters(t *testing.T, parallel int) {
	url := ledgertest.MigratedDatabase(t)
	var writers [2]*reconcile.Writer
	for i := range writers {
		w, err := reconcile.NewWriterWithConfig(migratedPool(t, url), reconcile.WriterConfig{Parallel: parallel, MinPartRows: 1})
		if err != nil {
			t.Fatal(err)
		}
		writers[i] = w
	}
	pool := migratedPool(t, url)
	const keys, rounds = 200, 30
	ctx := context.Background()
	batch := func(round, writer int) []ledger.Report {
		seq := int64(2*round + writer) // writer 1's reports of a round are newer
		var reps []ledger.Report
		for i := range keys {
			for _, p := range []string{"p1", "p2"} {
				reps = append(reps, rep(fmt.Sprintf("key-%03d", i), p, seq, seq, 1000-seq, false))
			}
		}
		r := rep("month-key", "p1", seq, seq, seq, false)
		r.WindowStart = t0.AddDate(0, round+1, 0)
		r.WindowEnd = r.WindowStart.Add(time.Minute)
		reps = append(reps, r)
		if writer == 1 {
			slices.Reverse(reps)
		}
		return reps
	}
	for round := 1; round <= rounds; round++ {
		errs := make(chan error, 2) // one result per writer
		for w := range 2 {
			reps := batch(round, w)
			go func() {
				_, err := writers[w].Write(ctx, reps)
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "40P01" {
					t.Fatalf("round %d: deadlock: %v", round, err)
				}
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	want := int64(2*rounds + 1)
	var n, bad int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE spent <> $1 OR seq <> $1 OR leased <> 1000 - $1)
		FROM usage_reports WHERE key LIKE 'key-%'`, want).Scan(&n, &bad); err != nil {
		t.Fatal(err)
	}
	if n != 2*keys || bad != 0 {
		t.Fatalf("%d rows (want %d), %d without spent = seq = %d, leased = %d", n, 2*keys, bad, want, 1000-want)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_windows WHERE key = 'month-key'`).Scan(&n); err != nil || n != rounds {
		t.Fatalf("month-key: %d windows, want %d (%v)", n, rounds, err)
	}
}

// A report whose month has no partition is written to one made for it, far
// in the past or the future too, and the billing views read it.
func TestWriterCreatesMonthPartitions(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	ctx := context.Background()
	w := reconcile.NewWriter(pool)
	tests := []struct {
		start     time.Time
		partition string
	}{
		{time.Date(1901, 12, 31, 23, 59, 0, 0, time.UTC), "usage_reports_p190112"},
		{time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), "usage_reports_p202603"},
		{time.Date(2026, 2, 28, 23, 59, 59, 999999000, time.FixedZone("x", -3600)), "usage_reports_p202603"}, // 00:59 UTC
		{time.Date(2999, 6, 1, 0, 0, 0, 0, time.UTC), "usage_reports_p299906"},
		{time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC), "usage_reports_p999912"},
	}
	var reps []ledger.Report
	for i, tt := range tests {
		r := rep(fmt.Sprintf("far-%d", i), "p1", 1, int64(10+i), 0, true)
		r.WindowStart, r.WindowEnd = tt.start, tt.start.Add(30*time.Second)
		reps = append(reps, r)
	}
	res, err := w.Write(ctx, reps)
	if err != nil || res.Inserted != len(tests) {
		t.Fatalf("write: %+v, %v", res, err)
	}
	for i, tt := range tests {
		var part string
		var allowed int64
		if err := pool.QueryRow(ctx, `SELECT r.tableoid::regclass::text, v.allowed FROM usage_reports r
			JOIN usage_windows v USING (key, window_start) WHERE r.key = $1`, fmt.Sprintf("far-%d", i)).Scan(&part, &allowed); err != nil {
			t.Fatalf("%v: %v", tt.start, err)
		}
		if part != tt.partition || allowed != int64(10+i) {
			t.Fatalf("%v: in %s with allowed %d, want %s and %d", tt.start, part, allowed, tt.partition, 10+i)
		}
	}
	// Partitions that exist already are not created again.
	if res, err := w.Write(ctx, reps); err != nil || res.Unchanged != len(tests) {
		t.Fatalf("rewrite: %+v, %v", res, err)
	}
}
