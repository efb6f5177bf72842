package region_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
)

// storeFactory makes a fresh store for one contract case. advance moves the
// store's clock forward by at least d (for Redis, whose clock is its own,
// it waits until the bucket has refilled; there is no other way).
type storeFactory func(t *testing.T) (s region.Store, advance func(d time.Duration))

func memoryStores(t *testing.T) storeFactory {
	return func(t *testing.T) (region.Store, func(time.Duration)) {
		c := newManualClock()
		return region.NewMemoryStore(c), c.Advance
	}
}

// redisStores starts one redis-server for the calling test; every store it
// makes has its own key prefix on it.
func redisStores(cluster bool) func(t *testing.T) storeFactory {
	return func(t *testing.T) storeFactory {
		srv := testserver.StartRedisWith(t, testserver.RedisOptions{Cluster: cluster})
		return func(t *testing.T) (region.Store, func(time.Duration)) {
			return newRedisStore(t, srv.Addr, cluster), realWait
		}
	}
}

func newRedisStore(t *testing.T, addr string, cluster bool) *region.RedisStore {
	{
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
		prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
		return region.NewRedisStore(rdb, prefix)
	}
}

// realWait lets real time pass on a store whose clock cannot be moved.
func realWait(d time.Duration) { <-time.After(d) }

var stores = []struct {
	name  string
	setup func(t *testing.T) storeFactory
}{
	{"memory", memoryStores},
	{"redis", redisStores(false)},
	{"redis-cluster", redisStores(true)},
}

func lease(t *testing.T, s region.Store, req region.LeaseRequest) region.LeaseReply {
	t.Helper()
	rep, err := s.Lease(context.Background(), req)
	if err != nil {
		t.Fatalf("Lease(%+v): %v", req, err)
	}
	return rep
}

func TestStoreContract(t *testing.T) {
	if testing.Short() {
		t.Skip("contract against real Redis")
	}
	type step struct {
		wait    time.Duration
		req     region.LeaseRequest // Key, Rate, Capacity filled in if zero
		granted int64
		tokens  float64 // expected tokens left, ±0.5 for real clocks
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"new bucket starts full and grants what is asked", []step{
			{req: region.LeaseRequest{Want: 4, Min: 1}, granted: 4, tokens: 6},
		}},
		{"grant capped by what is left", []step{
			{req: region.LeaseRequest{Want: 8, Min: 1}, granted: 8, tokens: 2},
			{req: region.LeaseRequest{Want: 8, Min: 1}, granted: 2, tokens: 0},
		}},
		{"nothing below min", []step{
			{req: region.LeaseRequest{Want: 9, Min: 9}, granted: 9, tokens: 1},
			{req: region.LeaseRequest{Want: 5, Min: 2}, granted: 0, tokens: 1},
		}},
		{"returned permits come back, capped at capacity", []step{
			{req: region.LeaseRequest{Want: 6, Min: 1}, granted: 6, tokens: 4},
			{req: region.LeaseRequest{Return: 3, Demand: 4}, granted: 0, tokens: 7},
			{req: region.LeaseRequest{Return: 9}, granted: 0, tokens: 10},
		}},
		{"spread splits what is left near exhaustion", []step{
			{req: region.LeaseRequest{Want: 2, Min: 1, Spread: 4}, granted: 2, tokens: 8},
			{req: region.LeaseRequest{Want: 8, Min: 1, Spread: 4}, granted: 2, tokens: 6},
			{req: region.LeaseRequest{Want: 8, Min: 5, Spread: 4}, granted: 5, tokens: 1},
		}},
		{"debt is charged below zero, down to minus capacity", []step{
			{req: region.LeaseRequest{Debt: 4}, granted: 0, tokens: 10}, // a fresh bucket charges nothing
			{req: region.LeaseRequest{Debt: 4}, granted: 0, tokens: 6},
			{req: region.LeaseRequest{Want: 2, Min: 1, Debt: 5}, granted: 1, tokens: 0},
			{req: region.LeaseRequest{Debt: 30}, granted: 0, tokens: -10},
			{req: region.LeaseRequest{Want: 1, Min: 1}, granted: 0, tokens: -10},
		}},
		{"refill the cap threw away pays for debt first", []step{
			{req: region.LeaseRequest{Want: 1, Min: 1}, granted: 1, tokens: 9},
			{wait: 400 * time.Millisecond, req: region.LeaseRequest{Debt: 5}, granted: 0, tokens: 8}, // 4 refilled, 3 over the cap
		}},
		{"refill left over from one debt pays the next", []step{
			{req: region.LeaseRequest{Want: 1, Min: 1}, granted: 1, tokens: 9},
			{wait: 400 * time.Millisecond, req: region.LeaseRequest{Debt: 1, Grace: time.Minute}, granted: 0, tokens: 10}, // 3 over the cap: 2 left
			{req: region.LeaseRequest{Debt: 5, Grace: time.Minute}, granted: 0, tokens: 7},                                // 2 paid by credit
			{req: region.LeaseRequest{Debt: 1, Grace: time.Minute}, granted: 0, tokens: 6},                                // none left
		}},
		{"debt credit ends after its grace", []step{
			{req: region.LeaseRequest{Want: 1, Min: 1}, granted: 1, tokens: 9},
			{wait: 400 * time.Millisecond, req: region.LeaseRequest{Debt: 1, Grace: 300 * time.Millisecond}, granted: 0, tokens: 10}, // 2 left over
			{wait: 400 * time.Millisecond, req: region.LeaseRequest{Want: 10, Min: 10}, granted: 10, tokens: 0},
			{req: region.LeaseRequest{Debt: 2}, granted: 0, tokens: -2},
		}},
		{"a fresh bucket charges no debt within its grace", []step{
			{req: region.LeaseRequest{Want: 1, Min: 1, Grace: 300 * time.Millisecond}, granted: 1, tokens: 9},
			{req: region.LeaseRequest{Debt: 4}, granted: 0, tokens: 9},
			{req: region.LeaseRequest{Want: 9, Min: 9}, granted: 9, tokens: 0},
			{wait: 400 * time.Millisecond, req: region.LeaseRequest{Debt: 6}, granted: 0, tokens: -2}, // 4 refilled, nothing wasted
		}},
		{"demand is counted and spends nothing", []step{
			{req: region.LeaseRequest{Demand: 7}, granted: 0, tokens: 10},
			{req: region.LeaseRequest{Want: 2, Min: 1, Demand: 2}, granted: 2, tokens: 8},
			{req: region.LeaseRequest{Demand: 30}, granted: 0, tokens: 8},
		}},
		{"refill at rate on the store's clock", []step{
			{req: region.LeaseRequest{Want: 10, Min: 1}, granted: 10, tokens: 0},
			{wait: 300 * time.Millisecond, req: region.LeaseRequest{Want: 10, Min: 1}, granted: 3, tokens: 0},
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel() // each store has its own server; the Redis cases wait in real time
			newStore := st.setup(t)
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					s, advance := newStore(t)
					key := fmt.Sprintf("contract-%d", i)
					var lastDemand int64
					for j, sp := range tc.steps {
						if sp.wait > 0 {
							advance(sp.wait)
						}
						req := sp.req
						req.Key, req.Rate, req.Capacity = key, 10, 10
						if req.Spread == 0 {
							req.Spread = 1
						}
						rep := lease(t, s, req)
						if rep.Granted != sp.granted {
							t.Fatalf("step %d: granted %d, want %d", j, rep.Granted, sp.granted)
						}
						// Real clocks refill a little between steps.
						if rep.Tokens < sp.tokens-1e-9 || rep.Tokens > sp.tokens+0.5 {
							t.Fatalf("step %d: tokens %v, want %v", j, rep.Tokens, sp.tokens)
						}
						if got := rep.DemandTotal - lastDemand; got != req.Demand {
							t.Fatalf("step %d: DemandTotal moved by %d, want %d", j, got, req.Demand)
						}
						lastDemand = rep.DemandTotal
						if since := time.Since(rep.StoreTime); math.Abs(since.Seconds()) > 30 { // manual clocks run ahead
							t.Fatalf("step %d: store time %v is %v away from now", j, rep.StoreTime, since)
						}
					}
				})
			}
			t.Run("bad requests are refused", func(t *testing.T) {
				s, _ := newStore(t)
				for _, req := range []region.LeaseRequest{
					{Key: "", Rate: 1, Capacity: 1, Spread: 1},
					{Key: "k", Rate: 0, Capacity: 1, Spread: 1},
					{Key: "k", Rate: 1, Capacity: -1, Spread: 1},
					{Key: "k", Rate: 1, Capacity: 1, Want: -1, Spread: 1},
					{Key: "k", Rate: 1, Capacity: 1, Spread: 0},
					{Key: "k", Rate: 1, Capacity: 1, Spread: 1, Debt: -1},
					{Key: "k", Rate: 1, Capacity: 1, Spread: 1, Demand: -1},
				} {
					if _, err := s.Lease(context.Background(), req); err == nil {
						t.Errorf("Lease(%+v) succeeded, want an error", req)
					}
				}
			})
			t.Run("a probe writes nothing", func(t *testing.T) {
				s, advance := newStore(t)
				probe := region.LeaseRequest{Key: "probe", Rate: 10, Capacity: 10, Spread: 1}
				if rep := lease(t, s, probe); rep.Tokens != 10 || rep.DemandTotal != 0 {
					t.Fatalf("probe of a new bucket: %+v", rep)
				}
				lease(t, s, region.LeaseRequest{Key: "probe", Rate: 10, Capacity: 10, Want: 2, Min: 1, Spread: 1})
				advance(400 * time.Millisecond) // 8 + 4: 2 over the cap
				lease(t, s, probe)              // must not move the refill clock
				advance(200 * time.Millisecond) // 8 + 6: 4 over the cap
				// The debt of 5 is paid by the 4 wasted since the last write,
				// leaving 1 to charge: 9. Had the probe written, only 2 would
				// have been wasted since, and 7 would be left.
				rep := lease(t, s, region.LeaseRequest{Key: "probe", Rate: 10, Capacity: 10, Debt: 5, Spread: 1})
				if rep.Tokens < 9-1e-9 || rep.Tokens > 9.5 {
					t.Fatalf("tokens %v, want 9: the probe wrote", rep.Tokens)
				}
			})
			t.Run("a capacity shrink clamps the bucket", func(t *testing.T) {
				s, _ := newStore(t)
				lease(t, s, region.LeaseRequest{Key: "shrink", Rate: 1, Capacity: 100, Want: 1, Min: 1, Spread: 1})
				rep := lease(t, s, region.LeaseRequest{Key: "shrink", Rate: 1, Capacity: 10, Want: 1, Min: 1, Spread: 1})
				if rep.Tokens > 9.5 {
					t.Fatalf("tokens %v after capacity fell to 10", rep.Tokens)
				}
			})
		})
	}
}

func TestRedisStoreSetsTTLOnEveryWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	prefix := fmt.Sprintf("ttl%d:", time.Now().UnixNano())
	s := region.NewRedisStore(rdb, prefix)
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
		{"slowest plan", region.MinRate, 1, 1, 1, 0, 2e6 * time.Second},
		{"fills in more than the clamp", region.MinRate, region.MaxCapacity, 1, 1, 0, region.MaxBucketTTL},
		// A share can scale a rate down past anything a plan allows: the
		// time to fill is +Inf, and the call used to fail after writing.
		{"tiny regional rate", 1e-300, 10, 1, 1, 0, region.MaxBucketTTL},
	}
	for _, tc := range cases {
		_, err := s.Lease(ctx, region.LeaseRequest{Key: tc.key, Rate: tc.rate, Capacity: tc.capacity, Want: tc.want, Min: tc.min, Return: tc.given, Spread: 1})
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

func TestRedisStoreReportsUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	s := region.NewRedisStore(rdb, "")
	_, err := s.Lease(context.Background(), region.LeaseRequest{Key: "k", Rate: 1, Capacity: 1, Want: 1, Min: 1, Spread: 1})
	if !errors.Is(err, region.ErrStoreUnavailable) {
		t.Fatalf("err = %v, want ErrStoreUnavailable", err)
	}
}

// TestStoreContractExactTake is the store operation of an exact plan
// (docs/design.md [plan-semantics]): a call with Want = Min = cost and
// Spread 1 takes cost or nothing, atomically, so that concurrent calls
// from any number of clients grant exactly the bucket's tokens.
func TestStoreContractExactTake(t *testing.T) {
	if testing.Short() {
		t.Skip("contract against real Redis")
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			newStore := st.setup(t)
			s, _ := newStore(t)
			for round := 0; round < 10; round++ {
				key := fmt.Sprintf("exact-%d", round)
				var granted atomic.Int64
				var wg sync.WaitGroup
				for i := 0; i < 50; i++ {
					cost := int64(1 + i%2) // costs of 1 and 2 against 7 tokens
					wg.Go(func() {
						rep, err := s.Lease(context.Background(), region.LeaseRequest{
							Key: key, Rate: region.MinRate, Capacity: 7, Want: cost, Min: cost, Spread: 1, Demand: cost})
						if err != nil {
							t.Error(err)
							return
						}
						if rep.Granted != 0 && rep.Granted != cost {
							t.Errorf("granted %d of a take of %d", rep.Granted, cost)
						}
						if rep.Tokens < 0 {
							t.Errorf("tokens %v after a take", rep.Tokens)
						}
						granted.Add(rep.Granted)
					})
				}
				wg.Wait()
				if g := granted.Load(); g < 6 || g > 7 {
					t.Fatalf("round %d: %d granted from 7 tokens, want 6 or 7 (no take past the tokens, and one of 1 or 2 always fits while 2 are left)", round, g)
				}
				if rep := lease(t, s, region.LeaseRequest{Key: key, Rate: region.MinRate, Capacity: 7, Spread: 1}); rep.Tokens+float64(granted.Load()) > 7+1e-6 {
					t.Fatalf("round %d: %v tokens left after %d granted from 7", round, rep.Tokens, granted.Load())
				}
			}
		})
	}
}
