package region

import (
	"sync"
	"time"
)

// shardCount is a power of two well above the core count, so that two
// goroutines rarely want the same shard mutex at once.
const shardCount = 64

// evictScan bounds the second-chance scan for a victim.
const evictScan = 32

// shard holds a slice of the keys. Map iteration starts at a random slot,
// so scanning it for an unreferenced entry is a randomised second-chance
// (CLOCK) approximation of LRU that needs no list pointers per key.
type shard struct {
	mu   sync.Mutex
	keys map[string]*entry // guarded by mu
	max  int
	// hot is the entry getLocked found last, hotKey its key and hotHash
	// the key's hash (Limiter.seed): a key checked again before another
	// key of its shard (a hot key, or one caller's burst) is found without
	// a map lookup, which was a quarter of the fast path's time, and
	// another key is told apart by its hash, without comparing keys.
	// Guarded by mu; nil when that key left.
	hot     *entry
	hotHash uint64
	hotKey  string

	// pending holds usage deltas that left their entry (window roll,
	// eviction, overflow) until the next Flush; guarded by mu.
	pending []Usage
	// returns holds unspent permits of evicted keys until the next sweep
	// gives them back to the store; guarded by mu.
	returns []pendingReturn

	// buckets holds the degraded local buckets of keys decided while the
	// store was unavailable; nil until the first; guarded by mu.
	buckets map[string]*degradedBucket
	// quotas holds the quota state of keys whose plans have quotas
	// (entry.quota); nil until the first; guarded by mu.
	quotas map[string]*quotaState

	// Counters for Stats; guarded by mu.
	outstanding                 int64
	allowed, rejected, degraded int64
	shadowRejected              int64

	_ [64]byte // keep neighbouring shards' mutexes off one cache line
}

// degradedBucket is a key's local token bucket in degraded mode
// (docs/design.md [degraded-share]).
type degradedBucket struct {
	tokens float64
	at     int64 // limiter ns of the last refill
	// debt is the cost allowed from this bucket, charged to the store on the
	// key's next successful store call (or sweep) so that the regional
	// bucket pays it back.
	debt int64
	// refusedAt is the limiter ns at which the store last refused the key's
	// call for a reason of the key's own (store.ErrStoreRejected); 0 = never, or
	// a call succeeded since.
	refusedAt int64
}

// refusing reports whether the store refused the key's call less than
// cooldown before limiter time now.
func (b *degradedBucket) refusing(now int64, cooldown time.Duration) bool {
	return b.refusedAt != 0 && now-b.refusedAt < int64(cooldown)
}

type pendingReturn struct {
	key            string
	permits        int64
	debt           int64
	rate, capacity float64
	quota          *quotaReturn // quota permits and charges for the key's quota counters; nil: none
}

// takeDebtLocked takes key's degraded debt, if any, for a store call to
// charge: the degraded bucket goes, and the key leaves degraded mode. A key
// whose last call the store refused less than cooldown before now keeps its
// bucket and debt until then.
func (s *shard) takeDebtLocked(key string, e *entry, now int64, cooldown time.Duration) int64 {
	b := s.buckets[key]
	if b == nil || b.debt <= 0 || b.refusing(now, cooldown) {
		return 0
	}
	delete(s.buckets, key)
	e.inDegraded = false
	return b.debt
}

// getLocked returns key's entry, nil when the key is not tracked; h is
// the key's hash under Limiter.seed.
func (s *shard) getLocked(h uint64, key string) *entry {
	if s.hotHash == h && s.hot != nil && s.hotKey == key {
		return s.hot
	}
	e := s.keys[key]
	if e != nil {
		s.hot, s.hotHash, s.hotKey = e, h, key
	}
	return e
}

// insertLocked adds a fresh entry for key, evicting one first if the shard
// is full.
func (s *shard) insertLocked(key string, w time.Duration) *entry {
	if len(s.keys) >= s.max {
		s.evictLocked(w)
	}
	e := &entry{nextLease: 1}
	s.keys[key] = e
	return e
}

// evictLocked drops one entry that was not used since the last scan passed
// it, handing its usage to pending and its permits to returns first, so that
// nothing is lost.
func (s *shard) evictLocked(w time.Duration) {
	var victim string
	var found bool
	n := 0
	for k, e := range s.keys {
		if e.busy {
			continue
		}
		if !e.referenced {
			victim, found = k, true
			break
		}
		e.referenced = false
		if !found {
			victim, found = k, true // fall back to the first candidate
		}
		if n++; n >= evictScan {
			break
		}
	}
	if !found {
		return // every entry is mid store call; grow past max for a moment
	}
	e := s.keys[victim]
	if e.hasUsage() {
		s.pending = append(s.pending, e.takeUsage(victim, w))
	}
	var debt int64
	if b := s.buckets[victim]; b != nil {
		debt = b.debt
	}
	permits := e.permits
	var qr *quotaReturn
	if q := s.quotas[victim]; q != nil {
		permits, qr = q.release(e.permits)
		delete(s.quotas, victim)
	}
	if permits > 0 || debt > 0 || qr != nil {
		s.returns = append(s.returns, pendingReturn{victim, permits, debt, float64(e.rate), float64(e.capacity), qr})
	}
	if s.hot == e {
		s.hot, s.hotKey = nil, ""
	}
	delete(s.keys, victim)
	delete(s.buckets, victim)
}
