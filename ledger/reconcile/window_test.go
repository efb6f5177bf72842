package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// Issue 37, item 4: one us row for an eu key, final=false, window_end
// 9999-01-01. The closer waited for that window_end, so it closed nothing,
// the month's export stayed complete=false and no sink ever sent it. Now
// such a report is dead-lettered (long_window) instead of written, and a
// row already in the ledger is closed MaxWindow + After after its window
// started, whatever its window_end says, so the month completes.
func TestOpenForEverWindow(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	ctx := context.Background()
	forever := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

	t.Run("a report is refused", func(t *testing.T) {
		js := connect(t, testserver.StartNATS(t).URL)
		r := rep("acct-refused", "us-1", 1, 1, 1, false)
		r.Region, r.WindowEnd = "us", forever
		publish(t, js, "", r)
		startReconciler(t, js, reconcile.NewWriter(pool), nil)
		testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			got, err := reasonCounts(pool)
			if err != nil || got["long_window"] != 1 {
				return fmt.Errorf("dead letters %v (%v), want one long_window", got, err)
			}
			return nil
		})
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_reports WHERE key = 'acct-refused'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows (%v) written for the refused report", n, err)
		}
	})

	t.Run("a row already written is closed", func(t *testing.T) {
		genuine := rep("acct-eu", "eu-1", 1, 40, 40, true)
		open := rep("acct-eu", "us-1", 1, 0, 0, false)
		open.Region, open.WindowEnd = "us", forever
		writeAt(t, pool, []ledger.Report{genuine, open}) // as the old reconciler wrote it
		closer, m := newCloser(t, pool, nil)
		now := t0.Add(reconcile.MaxWindow + reconcile.DefaultCloserConfig().After + time.Minute)
		closed, err := closer.Close(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := export.New(pool, export.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		var row export.Row
		err = ex.Export(ctx, export.Query{From: monthStart(t0, 0), To: monthStart(t0, 1), Granularity: export.Month, Now: monthStart(t0, 2)},
			func(rs []export.Row) error {
				for _, r := range rs {
					if r.Key == "acct-eu" {
						row = r
					}
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("window_end %v: closed %d row(s) %v after the window started (closer metric %v); export complete=%v billed=%d",
			forever.Format(time.DateOnly), closed, now.Sub(t0), val(m.Closed), row.Complete, row.Billed)
		if closed != 1 || !row.Complete || row.Billed != 40 {
			t.Fatalf("closed %d, export complete=%v billed=%d; want 1, true, 40", closed, row.Complete, row.Billed)
		}
	})
}
