package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/redisstore"
)

// TestLedgerShowsRefundsAndCharges: two limiters of one region on a real
// Redis, each reporting over real JetStream (batch encoding) to the
// reconciler and a real Postgres. A client checks with request ids
// (retrying some on the other limiter), refunds and charges (each sent
// twice, once to each limiter); the ledger shows spent (the gross
// allowed cost), refunded and charged exactly as the client saw them, and
// the views bill net = allowed + charged − refunded.
func TestLedgerShowsRefundsAndCharges(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	rsrv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: rsrv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	startReconciler(t, js, reconcile.NewWriter(pool), nil)

	plans := region.StaticPlans{Default: region.Plan{Rate: 0.001, Capacity: 1000}}
	var lims [2]*region.Limiter
	var reps [2]*ledger.Reporter
	for i := range lims {
		reps[i], _ = newReporter(t, js, fmt.Sprintf("p%d", i+1), func(c *ledger.Config) { c.Encoding = ledger.EncodingBatch })
		cfg := region.DefaultConfig()
		cfg.Region = "eu"
		cfg.Usage = reps[i]
		cfg.StoreTimeout = time.Second // a slow call would degrade and not be recorded
		lim, err := region.New(redisstore.New(rdb, "e2e:"), plans, cfg)
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = lim
	}

	type seen struct{ allowed, refunded, charged int64 }
	client := map[string]*seen{}
	for k := range 3 {
		key := fmt.Sprintf("acct-%d", k)
		s := &seen{}
		client[key] = s
		for j := range 20 {
			id := fmt.Sprintf("req-%d", j)
			cost := int64(10 + j)
			var first region.Decision
			for try, lim := range []*region.Limiter{lims[j%2], lims[(j+1)%2], lims[j%2]} {
				d, err := lim.AllowRequest(ctx, key, cost, id)
				if err != nil || d.Degraded {
					t.Fatalf("%s %s try %d: %+v %v", key, id, try, d, err)
				}
				if try == 0 {
					first = d
				} else if !d.Replayed || d.Allowed != first.Allowed {
					t.Fatalf("%s %s retry %d: %+v, want the first decision replayed", key, id, try, d)
				}
			}
			if first.Allowed {
				s.allowed += cost
			}
			if first.Allowed && j%3 == 0 { // failed upstream: refund half, sent twice
				for _, lim := range lims {
					a, err := lim.Refund(ctx, key, cost/2, id)
					if err != nil {
						t.Fatalf("refund %s %s: %v", key, id, err)
					}
					if !a.Replayed {
						s.refunded += cost / 2
					}
				}
			}
			if j%4 == 1 { // tokens known after the response, sent twice
				for _, lim := range lims {
					a, err := lim.Charge(ctx, key, int64(j+k), id+"-tokens")
					if err != nil {
						t.Fatalf("charge %s %s: %v", key, id, err)
					}
					if !a.Replayed {
						s.charged += int64(j + k)
					}
				}
			}
		}
		// A refund above the charge is refused and counts nothing.
		if _, err := lims[0].Refund(ctx, key, 1000, "req-0"); !errors.Is(err, region.ErrRefundExceedsCharge) && !errors.Is(err, region.ErrRequestConflict) {
			t.Fatalf("refund above the charge: %v", err)
		}
	}
	for i := range lims {
		lims[i].Drain(ctx)
		if err := reps[i].Close(ctx); err != nil {
			t.Fatal(err)
		}
	}

	testserver.WaitFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		rows, err := pool.Query(ctx, `SELECT key, sum(spent)::bigint, sum(refunded)::bigint, sum(charged)::bigint, bool_and(final)
			FROM usage_reports GROUP BY key`)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var key string
			var sp, rf, ch int64
			var final bool
			if err := rows.Scan(&key, &sp, &rf, &ch, &final); err != nil {
				return err
			}
			s := client[key]
			if s == nil || sp != s.allowed || rf != s.refunded || ch != s.charged || !final {
				return fmt.Errorf("%s: ledger spent %d refunded %d charged %d final %v, client saw %+v", key, sp, rf, ch, final, s)
			}
			n++
		}
		if n != len(client) {
			return fmt.Errorf("ledger has %d keys, want %d", n, len(client))
		}
		return rows.Err()
	})
	for key, s := range client {
		var net, allowed, refunded, charged int64
		if err := pool.QueryRow(ctx, `SELECT sum(net)::bigint, sum(allowed)::bigint, sum(refunded)::bigint, sum(charged)::bigint
			FROM usage_by_day WHERE key = $1`, key).Scan(&net, &allowed, &refunded, &charged); err != nil {
			t.Fatal(err)
		}
		if allowed != s.allowed || refunded != s.refunded || charged != s.charged || net != s.allowed+s.charged-s.refunded {
			t.Fatalf("%s: usage_by_day net %d allowed %d refunded %d charged %d, client %+v", key, net, allowed, refunded, charged, s)
		}
		if s.refunded == 0 || s.charged == 0 {
			t.Fatalf("%s: the test refunded %d and charged %d: nothing to see", key, s.refunded, s.charged)
		}
	}
}
