package memstore

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/region/store"
)

// Store is the store contract in process: the embedded default for a
// single process, and the reference the Redis scripts are held to
// (storetest's equivalence test). Buckets expire like Redis keys (twice
// the time to fill, at most store.MaxBucketTTL), swept as calls pass. Its
// only errors are refused requests (store.ErrStoreRejected) and the
// context's. Safe for concurrent use.
type Store struct {
	clock  clock.Clock
	seed   maphash.Seed
	shards [shardCount]shard
}

type shard struct {
	mu      sync.Mutex
	buckets map[string]*bucket // guarded by mu
	calls   int                // guarded by mu; paces sweeps
	// slots holds concurrency slots: key → lease id → expiry; nil until
	// the first; guarded by mu. A key's expired slots go at its next call.
	slots map[string]map[string]time.Time
	// requests holds request records (store.RequestStore) by key + " " + id;
	// nil until the first; guarded by mu; swept with the buckets.
	requests map[string]*record
	// quotas holds quota counters (store.QuotaStore) by key, unit and period
	// start; nil until the first; guarded by mu; swept with the buckets.
	quotas map[string]*counter
}

// record is one request id's record (redisstore's lua/request.lua hash).
type record struct {
	checked, allowed bool
	checkCost        int64
	charge, refund   int64 // 0: none (costs are ≥ 1)
	expires          time.Time
}

// bucket is one key's token bucket (redisstore's lua/bucket.lua hash).
type bucket struct {
	tokens  float64
	ts      time.Time
	demand  int64
	expires time.Time
	// credit is refill left over from paying a debt, for the region's other
	// processes' debts until creditEnd (see redisstore's lua/bucket.lua).
	credit    float64
	creditEnd time.Time
}

// sweepEvery is how many calls pass between sweeps of one shard.
const sweepEvery = 4096

// shardCount is a power of two well above the core count, so that calls
// for different keys rarely wait on one lock.
const shardCount = 64

var _ store.Store = (*Store)(nil)

// New returns an empty store on clk (nil: the system clock). Its clock is
// the store's clock, as Redis' is for redisstore.Store: a region.Limiter's
// Config.ClockOffset does not move it.
func New(clk clock.Clock) *Store {
	if clk == nil {
		clk = clock.System()
	}
	s := &Store{clock: clk, seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].buckets = make(map[string]*bucket)
	}
	return s
}

// lockShard locks and returns key's shard, sweeping it every
// sweepEvery calls.
func (s *Store) lockShard(key string, now time.Time) *shard {
	sh := &s.shards[maphash.String(s.seed, key)%shardCount]
	sh.mu.Lock()
	if sh.calls++; sh.calls%sweepEvery == 0 {
		sh.sweepLocked(now)
	}
	return sh
}

// sweepLocked forgets expired buckets, request records and quota counters.
func (sh *shard) sweepLocked(now time.Time) {
	for k, b := range sh.buckets {
		if !now.Before(b.expires) {
			delete(sh.buckets, k)
		}
	}
	for k, r := range sh.requests {
		if !now.Before(r.expires) {
			delete(sh.requests, k)
		}
	}
	for k, q := range sh.quotas {
		if !now.Before(q.expires) {
			delete(sh.quotas, k)
		}
	}
}

// InProcess reports that the store answers without I/O: a caller need not
// bound its calls with a deadline.
func (*Store) InProcess() bool { return true }

// Len returns the number of live buckets, for tests.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.buckets)
		sh.mu.Unlock()
	}
	return n
}
