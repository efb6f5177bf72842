package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/region"
)

// A limiter records a refund in the window, and on the process, that
// handle it, so a legitimate refund's row may have spent nothing. The
// reconciler bounds a refund by its key's net in its region over the
// refund horizon, not by its row: a refund one window later on another
// process is kept in full, while a forged one from a region that never
// served the key, one above the region's recent net, or one reaching for
// spend older than the horizon is cut and dead-lettered
// (refund_exceeds_spent).
func TestRefundBoundedByRegionHistory(t *testing.T) {
	at := func(r ledger.Report, region, process string, window time.Duration, spent, charged, refunded int64) ledger.Report {
		r.Region, r.ProcessID = region, process
		r.WindowStart, r.WindowEnd = t0.Add(window), t0.Add(window+time.Minute)
		r.Spent, r.Leased, r.Charged, r.Refunded = spent, spent, charged, refunded
		return r
	}
	base := rep("acct", "", 1, 0, 0, true)
	tests := []struct {
		name    string
		horizon time.Duration // 0: the default
		// history is written first, then refund, unless together: then
		// both come in one batch.
		history  []ledger.Report
		together bool
		refund   ledger.Report
		want     int64 // the refund's row refunds
		letters  int   // refund_exceeds_spent
	}{
		{name: "next window, other process that spent nothing: kept",
			history: []ledger.Report{at(base, "eu", "eu-1", 0, 40, 0, 0)},
			refund:  at(base, "eu", "eu-2", time.Minute, 0, 0, 30), want: 30},
		{name: "next window, other process, in the same batch as the spend: kept",
			history: []ledger.Report{at(base, "eu", "eu-1", 0, 40, 0, 0)}, together: true,
			refund: at(base, "eu", "eu-2", time.Minute, 0, 0, 30), want: 30},
		{name: "forged by a region that never served the key: cut to 0",
			history: []ledger.Report{at(base, "eu", "eu-1", 0, 40, 0, 0)},
			refund:  at(base, "us", "us-1", time.Minute, 0, 0, reconcile.MaxCounter), want: 0, letters: 1},
		{name: "above the region's recent net: cut to it",
			history: []ledger.Report{
				at(base, "eu", "eu-1", 0, 40, 0, 0),
				at(base, "eu", "eu-2", 0, 10, 5, 0),
				at(base, "eu", "eu-3", time.Minute, 0, 0, 20),  // an earlier refund
				at(base, "us", "us-1", time.Minute, 500, 0, 0), // another region's spend
			},
			refund: at(base, "eu", "eu-1", 2*time.Minute, 3, 0, 100), want: 3 + 40 + 15 - 20, letters: 1},
		{name: "spend older than the horizon does not count",
			horizon: time.Hour,
			history: []ledger.Report{
				at(base, "eu", "eu-1", 0, 40, 0, 0),
				at(base, "eu", "eu-1", 30*time.Minute, 7, 0, 0),
			},
			refund: at(base, "eu", "eu-2", 61*time.Minute, 0, 0, 45), want: 7, letters: 1},
		{name: "spend at the horizon's edge counts",
			horizon: time.Hour,
			history: []ledger.Report{at(base, "eu", "eu-1", 0, 40, 0, 0)},
			refund:  at(base, "eu", "eu-2", time.Hour, 0, 0, 40), want: 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := migratedPool(t, ledgertest.MigratedDatabase(t))
			js := connect(t, testserver.StartNATS(t).URL)
			ctx := context.Background()
			rows := func() (int, error) {
				var n int
				err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_reports`).Scan(&n)
				return n, err
			}
			if tt.together {
				publish(t, js, "", append(tt.history, tt.refund)...)
			} else {
				publish(t, js, "", tt.history...)
			}
			startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) {
				if tt.horizon != 0 {
					c.RefundHorizon = tt.horizon
				}
			})
			if !tt.together {
				testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
					if n, err := rows(); err != nil || n != len(tt.history) {
						return fmt.Errorf("%d rows (%v), want the history's %d", n, err, len(tt.history))
					}
					return nil
				})
				publish(t, js, "", tt.refund)
			}
			var got int64
			testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
				err := pool.QueryRow(ctx, `SELECT refunded FROM usage_reports WHERE region = $1 AND process_id = $2 AND window_start = $3`,
					tt.refund.Region, tt.refund.ProcessID, tt.refund.WindowStart).Scan(&got)
				if err != nil {
					return fmt.Errorf("the refund's row: %w", err)
				}
				return nil
			})
			letters, err := reasonCounts(pool)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("refunded %d as sent, %d kept, %d refund_exceeds_spent", tt.refund.Refunded, got, letters["refund_exceeds_spent"])
			if got != tt.want || letters["refund_exceeds_spent"] != tt.letters {
				t.Errorf("the refund's row refunds %d with letters %v; want %d and %d refund_exceeds_spent",
					got, letters, tt.want, tt.letters)
			}
		})
	}
}

// The refund horizon's default is the limiters' idempotency horizon: a
// refund may come that long after its request.
func TestRefundHorizonIsTheIdempotencyHorizon(t *testing.T) {
	if got := reconcile.DefaultConfig().RefundHorizon; got != region.DefaultIdempotencyHorizon {
		t.Fatalf("reconcile's refund horizon %v, the limiters' idempotency horizon %v", got, region.DefaultIdempotencyHorizon)
	}
}
