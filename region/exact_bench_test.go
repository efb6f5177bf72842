package region_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/redisstore"
	"github.com/quotaplatform/quota/region/store"
)

// BenchmarkExactVsLeased decides one hot key of an exact plan and of a
// leased plan, against the in-process store and a local redis-server, in
// the same run: latency per decision (ns/op, p50, p99) and store calls per
// decision. The plan never runs out, so every exact decision is one store
// call and the leased ones are almost all on the fast path. A decision
// whose store call took longer than the store timeout is degraded (for an
// exact plan: rejected), and counted in degraded/decision.
func BenchmarkExactVsLeased(b *testing.B) {
	stores := benchStores(b)
	ctx := context.Background()
	for _, st := range stores {
		for _, mode := range []region.Mode{region.ModeLeased, region.ModeExact} {
			b.Run(string(mode)+"/"+st.name, func(b *testing.B) {
				sto := &countingStore{Store: st.make()}
				plan := region.Plan{Rate: 1e9, Capacity: 1e9, Mode: mode}
				// The store timeout is raised from 5 ms so that a busy
				// 2-core machine's slow calls show in the latency instead
				// of opening the breaker, which fails an exact plan
				// closed for a cooldown (cheap rejections that would
				// flatter ns/op).
				cfg := region.DefaultConfig()
				cfg.StoreTimeout = 100 * time.Millisecond
				lim := startLimiter(b, sto, region.StaticPlans{Default: plan}, cfg)
				lim.Allow(ctx, "hot", 1)
				before := sto.Calls()
				lat := make([]time.Duration, 0, min(b.N, 1<<20))
				degraded := 0
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					d, err := lim.Allow(ctx, "hot", 1)
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(t0))
					}
					if d.Degraded {
						// A store call over the 5 ms timeout on a busy
						// machine: an exact plan fails closed. Reported:
						// it is part of exact mode's cost.
						degraded++
					} else if err != nil || !d.Allowed {
						b.Fatalf("decision %d: %+v %v", i, d, err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(sto.Calls()-before)/float64(b.N), "store-calls/decision")
				b.ReportMetric(float64(degraded)/float64(b.N), "degraded/decision")
				reportLatency(b, lat)
			})
		}
	}
}

// benchStore makes a fresh store of one kind for a sub-benchmark.
type benchStore struct {
	name string
	make func() store.Store
}

// benchStores are the in-process store and a local redis-server (each
// Redis store on its own prefix), for benchmarks that compare them in one
// run.
func benchStores(b *testing.B) []benchStore {
	srv := testserver.StartRedis(b)
	rdb := redisClientB(b, srv.Addr)
	return []benchStore{
		{"memory", func() store.Store { return memstore.New(nil) }},
		{"redis", func() store.Store {
			return redisstore.New(rdb, fmt.Sprintf("bench%d:", time.Now().UnixNano()))
		}},
	}
}

// reportLatency reports the p50 and p99 of the latencies lat (sorted in
// place).
func reportLatency(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
