package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// reconciler retention creates the coming months' partitions, detaches
// those older than --keep-months and prints them; a second run does nothing
// more; --keep-months is required.
func TestRetentionCommand(t *testing.T) {
	db := migratedDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Retention judges months by Postgres' clock (now() in SQL): so does
	// the test, whatever this process's clock says.
	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	now = now.UTC()
	month := func(m int) string {
		return "usage_reports_p" + time.Date(now.Year(), now.Month()+time.Month(m), 1, 0, 0, 0, 0, time.UTC).Format("200601")
	}
	for _, m := range []int{-14, -13, -12} {
		at := time.Date(now.Year(), now.Month()+time.Month(m), 2, 0, 0, 0, 0, time.UTC)
		if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition($1)`, at); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, seq, sent_at)
			VALUES ('acct', $1, 'p1', $1::timestamptz + interval '1 minute', 'eu', 1, 1, $1)`, at); err != nil {
			t.Fatal(err)
		}
	}

	var out bytes.Buffer
	if err := run([]string{"retention", "--keep-months", "12", "--ahead-months", "5"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out.String())
	if len(got) != 2 || !strings.HasPrefix(got[0], month(-14)+"_detached_") || !strings.HasPrefix(got[1], month(-13)+"_detached_") {
		t.Fatalf("detached %q, want the partitions of 14 and 13 months ago", got)
	}
	rows, err := conn.Query(ctx, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'usage_reports'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []int{-12, 0, 5} {
		if !slices.Contains(parts, month(m)) {
			t.Fatalf("%s missing after retention: %v", month(m), parts)
		}
	}

	out.Reset()
	if err := run([]string{"retention", "--keep-months", "12"}, &out, io.Discard); err != nil || out.Len() != 0 {
		t.Fatalf("second run: %q, %v", out.String(), err)
	}
	if err := run([]string{"retention"}, &out, io.Discard); err == nil || !strings.Contains(err.Error(), "--keep-months") {
		t.Fatalf("without --keep-months: %v", err)
	}
}

// Issue 27, scenario 6: retention detached a month although a key's
// credit carried out of it (a refund netted with carry-over) was still
// open, so the credit vanished and the key's later bill rose. Now the
// months whose end holds open credit are kept back and logged, the month
// before them, clean, is detached, and the current month's bill is the
// same before and after retention.
func TestRetentionKeepsOpenCredit(t *testing.T) {
	db := migratedDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Retention judges months by Postgres' clock (now() in SQL): so does
	// the test, whatever this process's clock says.
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	now = now.UTC()
	month := func(m int) time.Time {
		return time.Date(now.Year(), now.Month()+time.Month(m), 1, 0, 0, 0, 0, time.UTC)
	}
	var reps []ledger.Report
	add := func(key string, m int, hours time.Duration, spent, refunded int64) {
		start := month(m).Add(hours * time.Hour)
		reps = append(reps, ledger.Report{Key: key, WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: "p1",
			Region: "eu", Spent: spent, Leased: spent, Refunded: refunded, Final: true, Seq: 1, SentAt: start})
	}
	// Hourly periods: credit is never more than was billed before, so the
	// refund needs a bill before it, and an hour's carry shows it in the
	// month of the bill.
	add("old", -15, 36, 5, 0)      // a month with no credit: detached
	add("credit", -14, 36, 300, 0) // billed 300, then
	add("credit", -14, 60, 0, 300) // refunded in a later hour: 300 of credit carried out…
	add("credit", -13, 36, 100, 0) // …200 still open at the end of this month,
	add("credit", -1, 36, 150, 0)  // 50 here,
	add("credit", 0, 36, 100, 0)   // used up this month: billed 50.
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}
	billed := func() int64 {
		ex, err := export.New(pool, export.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		var b int64 = -1
		err = ex.Export(ctx, export.Query{From: month(0), To: month(1), Granularity: export.Hour, Now: now},
			func(rows []export.Row) error {
				for _, r := range rows {
					if r.Key == "credit" {
						b = r.Billed
					}
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := billed()
	if before != 50 {
		t.Fatalf("current month billed %d before retention, want 50", before)
	}

	var out, errOut bytes.Buffer
	metrics := filepath.Join(t.TempDir(), "retention.prom")
	if err := run([]string{"retention", "--keep-months", "12", "--metrics-file", metrics}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	prom, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"quota_ledger_retention_kept_back_months 2", "quota_ledger_retention_detached_partitions 1",
		fmt.Sprintf("quota_ledger_retention_oldest_kept_back_month_timestamp_seconds %g", float64(month(-14).Unix()))} {
		if !strings.Contains(string(prom), want+"\n") {
			t.Errorf("metrics file lacks %q:\n%s", want, prom)
		}
	}
	name := func(m int) string { return "usage_reports_p" + month(m).Format("200601") }
	if got := strings.Fields(out.String()); len(got) != 1 || !strings.HasPrefix(got[0], name(-15)+"_detached_") {
		t.Fatalf("detached %q, want only %s", got, name(-15))
	}
	for _, m := range []int{-14, -13} {
		if !strings.Contains(errOut.String(), `"partition":"`+name(m)+`"`) {
			t.Errorf("log does not say %s was kept back:\n%s", name(m), errOut.String())
		}
	}
	if !strings.Contains(errOut.String(), `"credit":"200"`) || !strings.Contains(errOut.String(), `"credit":"300"`) {
		t.Errorf("log does not give the open credit (300, then 200):\n%s", errOut.String())
	}
	if after := billed(); after != before {
		t.Fatalf("current month billed %d after retention, %d before", after, before)
	}
	var detached []time.Time
	rows, err := pool.Query(ctx, `SELECT month FROM usage_detached_months`)
	if err == nil {
		detached, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
	}
	if err != nil || len(detached) != 1 || !detached[0].Equal(month(-15)) {
		t.Fatalf("usage_detached_months %v (%v), want %v", detached, err, month(-15))
	}
}
