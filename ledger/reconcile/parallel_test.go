package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// splitWriter returns a Writer on pool that splits every batch of two rows
// or more into up to parallel parts.
func splitWriter(t testing.TB, pool *pgxpool.Pool, parallel int) *reconcile.Writer {
	t.Helper()
	w, err := reconcile.NewWriterWithConfig(pool, reconcile.WriterConfig{Parallel: parallel, MinPartRows: 1})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// allRows returns every row of usage_reports but its timestamps of
// writing, in primary-key order.
func allRows(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT key, window_start, process_id, window_end, region, spent, leased,
		rejected, degraded, final, seq, sent_at, would_reject, refunded, charged
		FROM usage_reports ORDER BY key COLLATE "C", window_start, process_id COLLATE "C"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(v))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A batch written in parts, at once, leaves the ledger and the counts one
// transaction leaves: new rows, rows updated, reports of one row merged
// before the split, reordered and duplicated reports, and rows in months
// that have no partition yet (created, then only those parts written
// again).
func TestWriterPartsMatchOneTransaction(t *testing.T) {
	ctx := context.Background()
	onePool := migratedPool(t, ledgertest.MigratedDatabase(t))
	one := reconcile.NewWriter(onePool) // batches far below 2·MinPartRows rows: one part
	partsPool := migratedPool(t, ledgertest.MigratedDatabase(t))
	parts := splitWriter(t, partsPool, 4)
	batch := func(round int) []ledger.Report {
		var reps []ledger.Report
		for i := range 20 {
			for _, p := range []string{"p1", "p2"} {
				seq := int64(round + i%3)
				reps = append(reps, rep(fmt.Sprintf("key-%02d", i), p, seq, 10*seq, 100-seq, round == 3 && i%2 == 0))
				reps = append(reps, rep(fmt.Sprintf("key-%02d", i), p, seq-1, 10*seq-5, 7, false)) // older: merged away
			}
			if round >= 2 { // rows that appear in later rounds, some in months not yet partitioned
				r := rep(fmt.Sprintf("late-%02d", i), "p1", int64(round), int64(round), 1, false)
				r.WindowStart = t0.AddDate(0, 12*(i%3), 0)
				r.WindowEnd = r.WindowStart.Add(time.Minute)
				reps = append(reps, r)
			}
		}
		return reps
	}
	for round := 1; round <= 4; round++ {
		reps := batch(min(round, 3)) // round 4 writes round 3's batch again: unchanged
		want, err := one.Write(ctx, reps)
		if err != nil {
			t.Fatalf("round %d, one transaction: %v", round, err)
		}
		got, err := parts.Write(ctx, reps)
		if err != nil {
			t.Fatalf("round %d, in parts: %v", round, err)
		}
		if got != want {
			t.Fatalf("round %d: in parts %+v, one transaction %+v", round, got, want)
		}
		if round == 4 && got.Unchanged != got.Rows {
			t.Fatalf("round 4 rewrote a batch: %+v, want every row unchanged", got)
		}
	}
	wantRows, gotRows := allRows(t, onePool), allRows(t, partsPool)
	if strings.Join(gotRows, "\n") != strings.Join(wantRows, "\n") {
		t.Fatalf("ledger written in parts:\n%s\nin one transaction:\n%s", strings.Join(gotRows, "\n"), strings.Join(wantRows, "\n"))
	}
	if len(gotRows) != 60 {
		t.Fatalf("%d rows, want 60", len(gotRows))
	}
}

// A part that Postgres refuses fails the batch with Postgres's error (a
// permanent one, which the Reconciler splits on); that part wrote nothing,
// while the other parts, each its own transaction, committed.
func TestWriterFailedPartFailsBatch(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	if _, err := pool.Exec(ctx, `ALTER TABLE usage_reports ADD CONSTRAINT test_refused CHECK (key NOT LIKE 'k-25%')`); err != nil {
		t.Fatal(err)
	}
	var reps []ledger.Report
	for i := range 30 {
		reps = append(reps, rep(fmt.Sprintf("k-%02d", i), "p1", 1, 1, 1, false))
	}
	_, err := splitWriter(t, pool, 3).Write(ctx, reps) // parts k-00…k-09, k-10…k-19, k-20…k-29
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.ConstraintName != "test_refused" {
		t.Fatalf("Write: %v, want the refusal of test_refused", err)
	}
	var n, inLast int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE key >= 'k-20') FROM usage_reports`).Scan(&n, &inLast); err != nil {
		t.Fatal(err)
	}
	if n != 20 || inLast != 0 {
		t.Fatalf("%d rows written, %d of the refused part; want the 20 of the other parts, none of it", n, inLast)
	}
}

// A reconciler whose Writer splits batches acknowledges a message only
// once its report is committed: a report Postgres refuses fails its part
// and so the batch, which the reconciler splits down to the refused
// report (a dead letter); every other report lands, and nothing is left
// to redeliver.
func TestReconcilerWithSplitWriterDeadLettersRefusedReport(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	if _, err := pool.Exec(context.Background(), `ALTER TABLE usage_reports ADD CONSTRAINT test_refused CHECK (key NOT LIKE 'refused%')`); err != nil {
		t.Fatal(err)
	}
	js := connect(t, testserver.StartNATS(t).URL)
	var reps []ledger.Report
	want := map[string]int64{}
	for i := range 40 {
		r := rep(fmt.Sprintf("k-%02d", i), "p1", 1, int64(i+1), 1, true)
		if i == 33 {
			r.Key = "refused-33"
		} else {
			want[r.Key] = r.Spent
		}
		reps = append(reps, r)
	}
	publish(t, js, "", reps...) // before the reconciler starts: one batch holds them all
	x := startReconciler(t, js, splitWriter(t, pool, 4), nil)
	waitSpent(t, pool, want, 10*time.Second)
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n, d := val(x.m.Reports), sumVec(x.m.DeadLetters); n != 39 || d != 1 {
			return fmt.Errorf("%v reports written and %v dead-lettered, want 39 and 1", n, d)
		}
		return nil
	})
	waitConsumerDrained(t, js)
}

// WriterConfig out of bounds is refused naming its field.
func TestWriterConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  reconcile.WriterConfig
		want string
	}{
		{reconcile.WriterConfig{Parallel: 0, MinPartRows: 1}, "Parallel"},
		{reconcile.WriterConfig{Parallel: reconcile.MaxWriteParallel + 1, MinPartRows: 1}, "Parallel"},
		{reconcile.WriterConfig{Parallel: 2, MinPartRows: 0}, "MinPartRows"},
	} {
		if _, err := reconcile.NewWriterWithConfig(nil, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := reconcile.NewWriterWithConfig(nil, reconcile.DefaultWriterConfig()); err != nil {
		t.Errorf("DefaultWriterConfig: %v", err)
	}
}
