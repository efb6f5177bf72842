package region

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/scratch"
	"github.com/quotaplatform/quota/region/store"
)

// slowStripes serialises store calls per key without a mutex per entry:
// keys that share a stripe also share the wait, which is rare and harmless.
const slowStripes = 1024

// Limiter decides locally by spending leased permits. Create it with New,
// run its background loop with Run, and call Allow from any goroutine.
//
// It holds what every capability shares (configuration, clocks, the
// shards of per-key entries, the breaker) and the fast path; the
// capabilities are types of their own that it composes (leases, sweeper,
// storeClient, idempotency, quotas, slots, degradedMode, planCache).
type Limiter struct {
	store store.Store
	plans planCache
	cfg   Config
	clock clock.Clock // Config.Clock, or clock.System()
	seed  maphash.Seed

	start     time.Time // origin of limiter time, read from clock
	system    bool      // Config.Clock is nil: decisions read the coarse clock, or time.Since
	startWall int64     // unix ns of start on the local wall clock, plus Config.ClockOffset

	epoch  atomic.Uint32 // bumped by InvalidateAll: cached plans are stale
	coarse atomic.Int64  // limiter time kept by Run every coarseTick; 0 when Run is not running
	offset clockOffset   // store clock minus local clock

	breaker breaker

	shards [shardCount]shard
	slow   [slowStripes]sync.Mutex

	// flushBuf is Flush's batch, reused: 10,000 keys changed a second make
	// a 10,000-delta batch a second. Guarded by flushMu.
	flushMu  sync.Mutex
	flushBuf scratch.Buffer[Usage]

	// The capabilities, each owning its state and its part of the store
	// contract (TestStatesOwnTheirFields): the store's optional interfaces
	// are found once, by New, and held by the capability that calls them
	// (nil when the store lacks one: plans with quotas, ids or concurrency
	// then degrade, flagged, or fail with ErrNoIdempotency or
	// ErrNoConcurrency). Last, so that the fields the decision path reads
	// keep their places.
	leases  leases
	sweeper sweeper
	calls   storeClient
	idem    idempotency
	quotas  quotas
	slots   slots
	// degraded decides without the store.
	degraded degradedMode
}

// inProcess is a store that answers without I/O (memstore.Store).
type inProcess interface{ InProcess() bool }

// New returns a Limiter that leases from store and resolves plans with plans.
// It starts no goroutine: call Run for the background loop.
func New(st store.Store, plans PlanResolver, cfg Config) (*Limiter, error) {
	if st == nil {
		return nil, fmt.Errorf("region: store must not be nil")
	}
	if plans == nil {
		return nil, fmt.Errorf("region: plan resolver must not be nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The choice of the coarse clock is made here, by the nil, and never by
	// inspecting a Clock's type (docs/design.md [store-clock]).
	system := cfg.Clock == nil
	clk := cfg.Clock
	if system {
		clk = clock.System()
	}
	start := clk.Now()
	l := &Limiter{
		store:     st,
		plans:     planCache{resolver: plans},
		cfg:       cfg,
		clock:     clk,
		seed:      maphash.MakeSeed(),
		start:     start,
		startWall: start.UnixNano() + int64(cfg.ClockOffset),
		system:    system,
		breaker:   breaker{threshold: cfg.BreakerThreshold, cooldown: cfg.BreakerCooldown},
	}
	// The store's optional interfaces are asserted here, once, each for
	// the capability that calls it; no call path asserts them again.
	qs, _ := st.(store.QuotaStore)
	rs, _ := st.(store.RequestStore)
	ss, _ := st.(store.SlotStore)
	ip, ok := st.(inProcess)
	l.calls.init(l, ok && ip.InProcess())
	l.quotas.init(l, qs)
	l.idem.init(l, rs, cfg.IdempotencyHorizon)
	l.slots = slots{l: l, store: ss}
	l.leases, l.sweeper, l.degraded = leases{l}, sweeper{l}, degradedMode{l}
	if cfg.Observer != nil {
		l.breaker.onChange = cfg.Observer.BreakerState
	}
	// Hashing spreads keys unevenly: give each shard a tenth more than its
	// even part, so that the cap does not evict before MaxKeys are tracked.
	perShard := (cfg.MaxKeys*11/10 + shardCount - 1) / shardCount
	for i := range l.shards {
		l.shards[i].keys = make(map[string]*entry, min(perShard, 1<<16))
		l.shards[i].max = perShard
	}
	return l, nil
}

// now is limiter time: nanoseconds on the clock since New (on the system
// clock, its monotonic reading), plus one so that zero can mean "never".
// With Config.Clock nil it uses time.Since, which reads the monotonic clock
// alone: half the cost of time.Now on the decision path.
//
// While Run is running with Config.Clock nil, decisions read a coarse clock
// that Run advances every coarseTick instead: reading the clock is the
// largest cost of a decision on virtual machines (25–40 ns), and lease
// expiry, staleness and window rolls need no finer resolution
// (docs/design.md [store-clock]).
func (l *Limiter) now() int64 {
	if l.system {
		if c := l.coarse.Load(); c != 0 {
			return c
		}
		return int64(time.Since(l.start)) + 1
	}
	return int64(l.clock.Now().Sub(l.start)) + 1
}

// storeNanos converts limiter time to unix nanoseconds on the store's clock.
func (l *Limiter) storeNanos(now int64) int64 { return l.startWall + now + l.offset.get() }

// CoarseClock reports whether decisions read the coarse clock that Run
// keeps: Config.Clock is nil and Run is running. Otherwise every decision
// reads the clock (the monotonic clock alone when Config.Clock is nil).
func (l *Limiter) CoarseClock() bool { return l.coarse.Load() != 0 }

func (l *Limiter) shardOf(h uint64) *shard { return &l.shards[h%shardCount] }

// Allow spends cost units of key's limit if the region can afford them. It
// makes no I/O when the key's lease covers cost; otherwise it makes one store
// call (bounded by Config.StoreTimeout) or, when the store is unavailable,
// decides from a local degraded bucket. A rejection is a Decision with
// Allowed false; an error means the input was bad or the key has no plan.
func (l *Limiter) Allow(ctx context.Context, key string, cost int64) (d Decision, err error) {
	if err := CheckKey(key); err != nil {
		return Decision{}, err
	}
	if cost <= 0 {
		return Decision{}, fmt.Errorf("%w: cost must be positive, got %d", ErrInvalidCost, cost)
	}
	h := maphash.String(l.seed, key)
	sh := l.shardOf(h)
	now := l.now()
	sh.mu.Lock()
	if e := sh.getLocked(h, key); e != nil && e.epoch == l.epoch.Load() {
		decided, err := l.decideLocked(sh, key, e, now, cost, &d)
		sh.mu.Unlock()
		if decided {
			return d, err
		}
	} else {
		sh.mu.Unlock()
	}
	d, err = l.allowSlow(ctx, key, h, cost)
	if d.Path == PathFast {
		d.Path = PathSlow // every way through allowSlow but the degraded one
	}
	return d, err
}

// AllowEndpoint is Allow with the cost of endpoint from Config.Costs.
func (l *Limiter) AllowEndpoint(ctx context.Context, key, endpoint string) (Decision, error) {
	cost, err := l.EndpointCost(endpoint)
	if err != nil {
		return Decision{}, err
	}
	return l.Allow(ctx, key, cost)
}

// Invalidate ends key's lease, so that its next decision re-reads its plan
// and share and re-leases at the new size. Call it when the key's share or
// plan changes.
func (l *Limiter) Invalidate(key string) { l.endLease(key, false) }

// Reshare tells the limiter that key's region share changed. The lease ends
// at once, as with Invalidate, only when the key is constrained: the
// region's bucket held less than half its capacity at the last sync (or
// the key is deciding from a degraded bucket). A key far below its limit
// keeps its lease and takes the new share at its next store call, when the
// lease runs out or within LeaseTTL: the shares of keys with little demand
// move with every gossip interval, and ending their leases each time cost a
// store call per key per interval for no accuracy (their buckets are full).
// Until that call the region's bucket refills at the old share, so a burst
// from such a key in those seconds may use the old share's capacity.
func (l *Limiter) Reshare(key string) { l.endLease(key, true) }

// endLease makes key's next decision re-read its plan and share and
// re-lease; onlyConstrained spares a key far below its limit (Reshare).
func (l *Limiter) endLease(key string, onlyConstrained bool) {
	h := maphash.String(l.seed, key)
	sh := l.shardOf(h)
	sh.mu.Lock()
	if e := sh.keys[key]; e != nil && (!onlyConstrained || e.inDegraded || 2*e.remaining < int64(e.capacity)) {
		e.epoch-- // no longer equal to the current epoch
	}
	sh.mu.Unlock()
}

// InvalidateAll ends every lease, for a catalogue change.
func (l *Limiter) InvalidateAll() {
	l.epoch.Add(1)
	l.plans.clear() // entries keep their copies until they re-resolve
}

func mapHash(l *Limiter, key string) uint64 { return maphash.String(l.seed, key) }
