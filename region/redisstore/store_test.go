package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/redisstore"
	"github.com/quotaplatform/quota/region/store"
	"github.com/quotaplatform/quota/region/store/storetest"
)

// region.MinRate and region.MaxCapacity, the plan bounds.
const minRate, maxCapacity = 1e-6, 1e12

// TestConformance runs the store contract's suite against a redis-server
// and a one-node Redis Cluster, each store on a key prefix of its own.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	for _, cluster := range []bool{false, true} {
		name := "redis"
		if cluster {
			name = "redis-cluster"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartRedisWith(t, testserver.RedisOptions{Cluster: cluster})
			storetest.Run(t, func(t *testing.T) (store.Store, func(time.Duration)) {
				return newStore(t, srv.Addr, cluster), storetest.WaitReal
			})
		})
	}
}

var prefixes atomic.Int64

// newStore is a store on its own key prefix of the server at addr.
func newStore(t *testing.T, addr string, cluster bool) *redisstore.Store {
	var rdb redis.Scripter
	if cluster {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		rdb = c
	} else {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		rdb = c
	}
	return redisstore.New(rdb, fmt.Sprintf("t%d-%d:", time.Now().UnixNano(), prefixes.Add(1)))
}

// TestStoreSetsTTLOnEveryWrite: every write sets the bucket's expiry to
// twice its time to fill, clamped to [1 s, store.MaxBucketTTL], and no key
// is left without one.
func TestStoreSetsTTLOnEveryWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	prefix := fmt.Sprintf("ttl%d:", time.Now().UnixNano())
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	cases := []struct {
		key              string
		rate, capacity   float64
		want, min, given int64
		ttl              time.Duration // twice the time to fill, in [1s, MaxBucketTTL]
	}{
		{"fast", 1000, 100, 1, 1, 0, time.Second},
		{"slow", 1, 100, 5, 1, 0, 200 * time.Second},
		{"return-only", 10, 10, 0, 0, 3, 2 * time.Second},
		{"rejected", 1, 5, 10, 10, 0, 10 * time.Second},
		{"slowest plan", minRate, 1, 1, 1, 0, 2e6 * time.Second},
		{"fills in more than the clamp", minRate, maxCapacity, 1, 1, 0, store.MaxBucketTTL},
		// A share can scale a rate down past anything a plan allows: the
		// time to fill is +Inf, and the call used to fail after writing.
		{"tiny regional rate", 1e-300, 10, 1, 1, 0, store.MaxBucketTTL},
	}
	for _, tc := range cases {
		_, err := s.Lease(ctx, store.LeaseRequest{Key: tc.key, Rate: tc.rate, Capacity: tc.capacity, Want: tc.want, Min: tc.min, Return: tc.given, Spread: 1})
		if err != nil {
			t.Fatal(err)
		}
		pttl, err := rdb.PTTL(ctx, s.BucketKey(tc.key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl <= 0 || pttl > tc.ttl || pttl < tc.ttl-time.Second {
			t.Errorf("%s: PTTL %v, want about %v", tc.key, pttl, tc.ttl)
		}
	}
	// Every key under the prefix has a TTL: nothing leaks.
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(cases) {
		t.Fatalf("found %d keys, want %d: %v", len(keys), len(cases), keys)
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no TTL (%v)", k, ttl)
		}
	}
}

// TestStoreReportsUnavailable: a Redis that cannot be reached is
// store.ErrStoreUnavailable.
func TestStoreReportsUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	s := redisstore.New(rdb, "")
	_, err := s.Lease(context.Background(), store.LeaseRequest{Key: "k", Rate: 1, Capacity: 1, Want: 1, Min: 1, Spread: 1})
	if !errors.Is(err, store.ErrStoreUnavailable) {
		t.Fatalf("err = %v, want ErrStoreUnavailable", err)
	}
}

// TestQuotaCounterTTL: a counter lives until a day after its period's end
// (store.QuotaTTL), read back from Redis.
func TestQuotaCounterTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	rs := redisstore.New(rdb, "qexp:")
	now, err := rdb.Time(context.Background()).Result() // the store's clock, as the counters'
	if err != nil {
		t.Fatal(err)
	}
	p := store.QuotaPeriod{Unit: period.Day, Start: now.Add(-time.Hour), End: now.Add(time.Hour), Limit: 10, Share: 1}
	if _, err := rs.LeaseQuota(context.Background(), store.QuotaCall{Key: "acct_exp", Periods: []store.QuotaPeriod{p}, Want: 1}); err != nil {
		t.Fatal(err)
	}
	var ttl time.Duration
	ttl, err = rdb.PTTL(context.Background(), rs.QuotaKey("acct_exp", period.Day, p.Start)).Result()
	if err != nil || ttl < 24*time.Hour || ttl > 25*time.Hour {
		t.Fatalf("counter TTL %v (%v), want about 25 h: a day after the period's end", ttl, err)
	}
}
