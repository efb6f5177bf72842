package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/quotabase/pgledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// Issue 37, item 2: a holder of us's limiter credentials publishes, on us's
// own subject, a report for an eu customer's key refunding the largest
// counter. The old ledger took it: quota base us −9,007,199,254,740,991
// (every region then granted far beyond the monthly quota), export
// billed 0 and a credit of 9·10^15 carried for ever. Now the refund is cut
// to what us's rows of the key net over the refund horizon, nothing (the
// report is written, the original kept as a dead letter with its reason),
// each row's and region's
// net is floored at zero in the quota base, and the victim is billed what
// eu spent.
func TestForgedRefundCannotLowerBaseOrBill(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	ctx := context.Background()

	genuine := rep("acct-eu", "eu-1", 1, 40, 40, true)
	forged := rep("acct-eu", "us-1", 1, 0, 0, true)
	forged.Region, forged.Refunded = "us", reconcile.MaxCounter
	publish(t, js, "", genuine, forged)
	startReconciler(t, js, reconcile.NewWriter(pool), nil)
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		var rows int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_reports WHERE key = 'acct-eu'`).Scan(&rows); err != nil || rows != 2 {
			return fmt.Errorf("%d rows (%v), want eu's and us's", rows, err)
		}
		return nil
	})

	month := monthStart(t0, 0)
	base, err := pgledger.New(pool).SpentByRegion(ctx, "acct-eu", month, monthStart(t0, 1))
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for r, v := range base {
		if v < 0 {
			t.Errorf("quota base of region %s is %d, below zero", r, v)
		}
		total += v
	}
	if base["eu"] != 40 || total != 40 {
		t.Errorf("quota base %v (total %d), want eu 40 and total 40", base, total)
	}

	ex, err := export.New(pool, export.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var row export.Row
	err = ex.Export(ctx, export.Query{From: month, To: monthStart(t0, 1), Granularity: export.Month, Now: monthStart(t0, 2)},
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
	t.Logf("after the forged refund of %d: quota base %v, export refunded %d net %d billed %d carried out %d",
		int64(reconcile.MaxCounter), base, row.Refunded, row.Net, row.Billed, row.CarriedOut)
	if row.Billed != 40 || row.CarriedOut != 0 {
		t.Errorf("export billed %d carrying %d, want 40 and nothing", row.Billed, row.CarriedOut)
	}
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		got, err := reasonCounts(pool)
		if err != nil || got["refund_exceeds_spent"] != 1 {
			return fmt.Errorf("dead letters %v (%v), want one refund_exceeds_spent", got, err)
		}
		return nil
	})
}
