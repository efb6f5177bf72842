package region_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/redisstore"
)

// BenchmarkRequestID decides one hot key with and without a request id
// (docs/design.md [idempotency]), against the in-process store and a local
// redis-server, in the same run: latency per decision (ns/op, p50, p99),
// allocations and store calls per decision. Every id is new, so every
// check with one is a first decision: one store call that spends and
// records. "retry" sends one id again and again: the replayed answer.
func BenchmarkRequestID(b *testing.B) {
	stores := benchStores(b)
	ctx := context.Background()
	for _, st := range stores {
		for _, mode := range []string{"without-id", "with-id", "retry"} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				store := &countingStore{Store: st.make()}
				cfg := region.DefaultConfig()
				cfg.StoreTimeout = 100 * time.Millisecond // as BenchmarkExactVsLeased: a busy machine's slow call shows as latency
				lim := startLimiter(b, store, region.StaticPlans{Default: benchPlan}, cfg)
				lim.Allow(ctx, "hot", 1)
				lim.AllowRequest(ctx, "hot", 1, "retry")
				ids := make([]string, min(b.N, 1<<20))
				for i := range ids {
					ids[i] = "req-" + strconv.Itoa(i)
				}
				before := store.Calls()
				lat := make([]time.Duration, 0, min(b.N, 1<<20))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					var d region.Decision
					var err error
					switch mode {
					case "without-id":
						d, err = lim.Allow(ctx, "hot", 1)
					case "with-id":
						d, err = lim.AllowRequest(ctx, "hot", 1, ids[i%len(ids)])
					default:
						d, err = lim.AllowRequest(ctx, "hot", 1, "retry")
					}
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(t0))
					}
					if err != nil || !d.Allowed {
						b.Fatalf("decision %d: %+v %v", i, d, err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(store.Calls()-before)/float64(b.N), "store-calls/decision")
				reportLatency(b, lat)
			})
		}
	}
}

// BenchmarkRequestRecordBytes measures what a request id's record costs in
// Redis: b.N checks of one key, each with a new 33-byte id, and the growth
// of INFO memory's used_memory over them, per record (docs/design.md
// [idempotency]). Run with a fixed count, e.g. -benchtime 20000x.
func BenchmarkRequestRecordBytes(b *testing.B) {
	srv := testserver.StartRedis(b)
	rdb := redisClientB(b, srv.Addr)
	lim := startLimiter(b, redisstore.New(rdb, "benchrec:"), region.StaticPlans{Default: benchPlan}, region.DefaultConfig())
	ctx := context.Background()
	lim.AllowRequest(ctx, "acct_bench_1", 1, "warm-up")
	usedMemory := func() int64 {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		b.Fatal("INFO memory has no used_memory")
		return 0
	}
	before := usedMemory()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("order-%08d-0123456789abcdefghij", i) // 33 bytes
		if _, err := lim.AllowRequest(ctx, "acct_bench_1", 1, id); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(usedMemory()-before)/float64(b.N), "redis-bytes/record")
}
