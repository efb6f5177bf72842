package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// A region cannot touch another region's rows (issue 28, item 5). A holder
// of ap's limiter credentials may publish only on ap's subjects, and the
// subject check makes every report there one of ap's; but it may name any
// process, eu's included. Its reports, on real JetStream through the
// reconciler into Postgres, land in rows of ap's own and leave eu's row as
// eu reported it, whether ap's forgery comes after eu's report (a huge seq,
// final, refunds that would win every merge) or before it with the same
// message ID as eu's (which JetStream's duplicate window would otherwise
// drop as a redelivery).
func TestRegionCannotTouchAnotherRegionsRows(t *testing.T) {
	pool := migratedPool(t, testserver.NewDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	startReconciler(t, js, reconcile.NewWriter(pool), nil)
	ctx := context.Background()

	type row struct {
		spent, refunded, seq int64
		final                bool
	}
	for _, tc := range []struct {
		name        string
		forgedFirst bool
		forged      func(genuine ledger.Report) ledger.Report
	}{
		{"forgery after eu's report", false, func(g ledger.Report) ledger.Report {
			g.Region, g.Seq, g.Final, g.Spent, g.Refunded = "ap", 1<<62, true, 0, 1_000_000
			return g
		}},
		{"forgery before eu's report, same message id", true, func(g ledger.Report) ledger.Report {
			g.Region, g.Spent = "ap", 0 // seq, key, window and process as eu's
			return g
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			genuine := rep("acct-"+tc.name, "eu-1", 1, 40, 40, false)
			forged := tc.forged(genuine)
			if got := ledger.DefaultStreamConfig().Subject(forged.Region, forged.ProcessID); got != "quota.usage.ap.eu-1" {
				t.Fatalf("forged report published on %s, want ap's own subject", got)
			}
			if tc.forgedFirst {
				publish(t, js, "", forged)
				publish(t, js, "", genuine)
			} else {
				publish(t, js, "", genuine)
				publish(t, js, "", forged)
			}
			// ap's refund is cut to what its row spent (issue 37, item 2).
			want := map[string]row{"eu": {40, 0, 1, false}, "ap": {forged.Spent, min(forged.Refunded, forged.Spent+forged.Charged), forged.Seq, forged.Final}}
			testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
				got := map[string]row{}
				rows, err := pool.Query(ctx, `SELECT region, spent, refunded, seq, final FROM usage_reports
					WHERE key = $1 AND process_id = 'eu-1'`, genuine.Key)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var region string
					var r row
					if err := rows.Scan(&region, &r.spent, &r.refunded, &r.seq, &r.final); err != nil {
						return err
					}
					got[region] = r
				}
				if err := rows.Err(); err != nil {
					return err
				}
				if len(got) != len(want) || got["eu"] != want["eu"] || got["ap"] != want["ap"] {
					return fmt.Errorf("rows by region %+v, want %+v", got, want)
				}
				return nil
			})
		})
	}
}
