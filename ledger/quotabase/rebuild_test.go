package quotabase_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/redisstore"
)

// TestQuotaRebuiltFromTheLedger, end to end on real parts: a limiter on a
// real Redis spends 600 of a key's monthly quota of 1,000; its usage goes
// over JetStream to the reconciler and into Postgres. Then the limiter is
// restarted as a new process and its Redis flushed (every quota counter
// lost). The new process's counters are re-based on the ledger, answered
// over NATS by the reconciler's quota-base server before they grant, so
// the quota is not reset: the fleet admits exactly 1,000 across the
// restart, and the ledger ends equal to what the client saw.
func TestQuotaRebuiltFromTheLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server, NATS and Postgres")
	}
	ctx := context.Background()
	nsrv := testserver.StartNATS(t)
	nc := connect(t, nsrv.URL)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	url := ledgertest.MigratedDatabase(t)
	pool := ledgerPool(t, url, quotabase.DefaultConfig())
	startServer(t, nc, pool, quotabase.DefaultConfig())
	ledgertest.StartReconciler(t, js, writerPool(t, url), ledger.DefaultStreamConfig())
	rsrv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: rsrv.Addr})
	t.Cleanup(func() { rdb.Close() })

	qs, err := limit.NewQuotas([]limit.Quota{{Period: period.Month, Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	plan := limit.Plan{Name: "metered", Rate: 1e6, Capacity: 1e6, Quotas: qs}
	key := fmt.Sprintf("acct-rebuild-%d", time.Now().UnixNano())

	// process starts one limiter process of region eu: its reporter and
	// its quota-base client on the test's NATS.
	process := func(id string) (*region.Limiter, func()) {
		rep, metrics := ledgertest.Reporter(t, js, id, nil)
		cfg := region.DefaultConfig()
		cfg.Region = "eu"
		cfg.StoreTimeout = 2 * time.Second // about wiring, not latency
		cfg.Usage = rep
		cfg.QuotaBases = newClient(t, nc, 2*time.Second)
		lim, err := region.New(redisstore.New(rdb, "q:"), limit.StaticPlans{Default: plan}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := func() {
			lim.Drain(ctx)
			ledgertest.FlushAcked(t, rep, metrics, 0)
		}
		return lim, stop
	}
	spend := func(lim *region.Limiter, n int) (allowed int64) {
		for range n {
			d, err := lim.Allow(ctx, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		return allowed
	}

	first, stop := process("eu-1")
	before := spend(first, 600)
	stop()
	waitSpent(t, pool, key, before)
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	second, stop := process("eu-2")
	after := spend(second, 800)
	st := second.Stats()
	stop()
	total := before + after
	waitSpent(t, pool, key, total)
	t.Logf("allowed %d before and %d after a restart on a flushed Redis (quota 1000); %d base requests, %d failed", before, after, st.QuotaBaseRequests, st.QuotaBaseFailures)
	if before != 600 || total != 1000 {
		t.Fatalf("allowed %d then %d: want 600, then the quota's 1000 in all", before, after)
	}
	if st.QuotaBaseRequests == 0 || st.QuotaBaseFailures != 0 {
		t.Fatalf("%d base requests, %d failed: the counters were not re-based on the ledger", st.QuotaBaseRequests, st.QuotaBaseFailures)
	}
}

// waitSpent waits until the ledger holds want as key's spent cost.
func waitSpent(t *testing.T, pool *pgxpool.Pool, key string, want int64) {
	t.Helper()
	testserver.WaitFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		var got int64
		if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(spent), 0)::bigint FROM usage_reports WHERE key = $1`, key).Scan(&got); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("ledger has %d spent, want %d", got, want)
		}
		return nil
	})
}
