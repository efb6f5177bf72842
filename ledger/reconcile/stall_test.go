package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// Issue 37, item 0: one region's credentials publish, while the reconciler
// is away, a report of one key in each of the last 2,000 months, 2,000 late
// rows of another key at MaxCounter, then a valid report. A month of the
// few in range is held by a maintenance statement (an ACCESS EXCLUSIVE lock
// on its partition, as archiving or re-indexing a month takes). The old
// writer waited for that lock for ever: Postgres idle, no error logged,
// the batch redelivered every AckWait, nothing behind it written
// (TestManyMonthsBatchDoesNotStallIngestion, on an idle database, never
// met a lock). Now the part that waits fails after LockTimeout, the batch
// is split, the lone blocked report is parked on the stream, every other
// report, the valid one published after the stall began included, is
// written; once the lock is released the parked report lands too.
func TestLockedMonthDoesNotStallIngestion(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	ctx := context.Background()
	now := time.Now().UTC()
	var reps []ledger.Report
	for i := 1; i <= 2000; i++ {
		start := now.AddDate(0, -i, 0).Truncate(time.Minute)
		reps = append(reps, ledger.Report{Key: "months", WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: "p1", Region: "eu",
			Spent: 1, Leased: 1, Seq: 1, SentAt: now})
	}
	late := now.Add(-time.Hour).Truncate(time.Minute)
	for i := range 2000 {
		reps = append(reps, ledger.Report{Key: "late", WindowStart: late, WindowEnd: late.Add(time.Minute), ProcessID: fmt.Sprintf("p1~late%d", i),
			Region: "eu", Spent: reconcile.MaxCounter, Seq: 1, SentAt: now})
	}
	publish(t, js, "", reps...)

	// The maintenance statement: a month in range, its partition locked.
	locked := now.AddDate(0, -2, 0)
	lockedFrom := time.Date(locked.Year(), locked.Month(), 1, 0, 0, 0, 0, time.UTC)
	lockedTo := lockedFrom.AddDate(0, 1, 0)
	var part string
	if err := pool.QueryRow(ctx, `SELECT usage_ensure_partition($1)`, locked).Scan(&part); err != nil {
		t.Fatal(err)
	}
	lockTx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lockTx.Rollback(ctx) //nolint:errcheck // released below, or at the end
	if _, err := lockTx.Exec(ctx, fmt.Sprintf(`LOCK TABLE %s IN ACCESS EXCLUSIVE MODE`, part)); err != nil {
		t.Fatal(err)
	}

	errorLog := &errorRecords{}
	w, err := reconcile.NewWriterWithConfig(pool, reconcile.WriterConfig{Parallel: 2, MinPartRows: 1000, LockTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	x := startReconciler(t, js, w, func(c *reconcile.Config) {
		d := reconcile.DefaultConfig()
		c.MaxReportAge, c.MaxReportSkew = d.MaxReportAge, d.MaxReportSkew
		c.ParkDelay = time.Second
		c.Logger = slog.New(errorLog)
	})
	// The stall has begun once a writer waits for the lock.
	testserver.WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass`, part).Scan(&waiting); err != nil {
			return err
		}
		if waiting == 0 {
			return fmt.Errorf("no writer waits for %s yet", part)
		}
		return nil
	})
	stalledAt := time.Now()
	good := ledger.Report{Key: "good", WindowStart: now.Add(-time.Minute).Truncate(time.Minute), ProcessID: "p1", Region: "eu",
		Spent: 5, Leased: 5, Seq: 1, SentAt: now, Final: true}
	good.WindowEnd = good.WindowStart.Add(time.Minute)
	publish(t, js, "", good)

	// rows counts the ledger rows per key (a sum of the late rows would
	// pass the bigint range).
	rows := func(skipLocked bool) (map[string]int, error) {
		out := map[string]int{}
		q := `SELECT key, count(*) FROM usage_reports GROUP BY key`
		if skipLocked { // reading the locked month would wait for the lock too
			q = fmt.Sprintf(`SELECT key, count(*) FROM usage_reports WHERE window_start < '%s' OR window_start >= '%s' GROUP BY key`,
				lockedFrom.Format(time.RFC3339), lockedTo.Format(time.RFC3339))
		}
		rs, err := pool.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		for rs.Next() {
			var k string
			var n int
			if err := rs.Scan(&k, &n); err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, rs.Err()
	}
	inRange := 0
	for _, r := range reps[:2000] {
		if !r.WindowStart.Before(now.Add(-reconcile.DefaultConfig().MaxReportAge)) {
			inRange++
		}
	}
	want := func(months int, skipLocked bool) error {
		got, err := rows(skipLocked)
		if err != nil {
			return err
		}
		if got["good"] != 1 || got["late"] != 2000 || got["months"] != months {
			return fmt.Errorf("ledger rows by key %v, want good 1, late 2000, months %d", got, months)
		}
		return nil
	}
	testserver.WaitFor(t, 60*time.Second, 50*time.Millisecond, func() error { return want(inRange-1, true) })
	t.Logf("while %s was locked: the valid report written %v after the stall began; %v report(s) parked; %d error log line(s)",
		part, time.Since(stalledAt).Round(time.Millisecond), val(x.m.Parked), errorLog.count())
	if val(x.m.Parked) < 1 {
		t.Fatalf("parked %v reports, want the locked month's", val(x.m.Parked))
	}
	if errorLog.count() == 0 {
		t.Fatal("no error-level log line while a month blocked the batch")
	}
	if err := lockTx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	testserver.WaitFor(t, 60*time.Second, 50*time.Millisecond, func() error { return want(inRange, false) })
	t.Logf("the parked report written %v after the lock was released", time.Since(released).Round(time.Millisecond))
	waitConsumerDrained(t, js)
}

// errorRecords is a slog.Handler that counts the records at level Error.
type errorRecords struct {
	mu sync.Mutex
	n  int
}

func (h *errorRecords) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h *errorRecords) Handle(context.Context, slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	return nil
}
func (h *errorRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorRecords) WithGroup(string) slog.Handler      { return h }

func (h *errorRecords) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}
