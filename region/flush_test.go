package region_test

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// summingSink copies what it is handed, as UsageSink asks.
type summingSink struct {
	mu    sync.Mutex
	spent map[string]int64
}

func (s *summingSink) Record(batch []region.Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range batch {
		s.spent[u.Key] += u.Spent
	}
}

// Flush hands over a batch of every key's delta without allocating it
// afresh each time: once warm, a flush of 1,000 keys' usage allocates
// nothing, and every delta still arrives exactly once.
func TestFlushReusesItsBatch(t *testing.T) {
	ctx := context.Background()
	sink := &summingSink{spent: map[string]int64{}}
	cfg := region.DefaultConfig()
	cfg.Usage = sink
	lim, err := region.New(memstore.New(nil), region.StaticPlans{Default: benchPlan}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	spendAll := func() {
		for _, k := range keys {
			if d, _ := lim.Allow(ctx, k, 1); !d.Allowed {
				t.Fatalf("%s rejected", k)
			}
		}
	}
	spendAll() // leases and entries
	lim.Flush()
	spendAll()
	lim.Flush() // the batch's buffer has its size
	// The fewest allocations of five flushes, each of every key's delta,
	// counted around Flush alone (the spending may take leases).
	least := uint64(math.MaxUint64)
	for range 5 {
		spendAll()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		lim.Flush()
		runtime.ReadMemStats(&after)
		least = min(least, after.Mallocs-before.Mallocs)
	}
	if least > 0 {
		t.Errorf("a warm flush of %d keys' usage allocated %d times", len(keys), least)
	}
	lim.Flush()
	const runs = 2 + 5
	for _, k := range keys {
		if got := sink.spent[k]; got != runs {
			t.Fatalf("%s: %d spent handed over, want %d", k, got, runs)
		}
	}
}
