package region

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// slowStripes serialises store calls per key without a mutex per entry:
// keys that share a stripe also share the wait, which is rare and harmless.
const slowStripes = 1024

// Limiter decides locally by spending leased permits. Create it with New,
// run its background loop with Run, and call Allow from any goroutine.
type Limiter struct {
	store Store
	plans PlanResolver
	cfg   Config
	clock Clock
	seed  maphash.Seed

	start     time.Time // monotonic origin of limiter time
	system    bool      // clock is the system clock: time.Since reads only the monotonic clock
	startWall int64     // unix ns of start on the local wall clock

	epoch  atomic.Uint32 // bumped by InvalidateAll: cached plans are stale
	coarse atomic.Int64  // limiter time kept by Run every coarseTick; 0 when Run is not running
	offset clockOffset   // store clock minus local clock

	breaker breaker

	storeCalls atomic.Int64

	shards [shardCount]shard
	slow   [slowStripes]sync.Mutex
}

// New returns a Limiter that leases from store and resolves plans with plans.
// It starts no goroutine: call Run for the background loop.
func New(store Store, plans PlanResolver, cfg Config) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("region: store must not be nil")
	}
	if plans == nil {
		return nil, fmt.Errorf("region: plan resolver must not be nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	clock := cfg.Clock
	if clock == nil {
		clock = systemClock{}
	}
	_, system := clock.(systemClock)
	start := clock.Now()
	l := &Limiter{
		store:     store,
		plans:     plans,
		cfg:       cfg,
		clock:     clock,
		seed:      maphash.MakeSeed(),
		start:     start,
		startWall: start.UnixNano(),
		system:    system,
		breaker:   breaker{threshold: cfg.BreakerThreshold, cooldown: cfg.BreakerCooldown},
	}
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

// now is limiter time: nanoseconds on the clock's monotonic reading since
// New, plus one so that zero can mean "never". On the system clock it uses
// time.Since, which reads the monotonic clock alone: half the cost of
// time.Now on the decision path.
//
// While Run is running on the system clock, decisions read a coarse clock
// that Run advances every coarseTick instead: reading the clock is the
// largest cost of a decision on virtual machines (25–40 ns), and lease
// expiry, staleness and window rolls need no finer resolution.
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

func (l *Limiter) shardOf(h uint64) *shard { return &l.shards[h%shardCount] }

// Allow spends cost units of key's limit if the region can afford them. It
// makes no I/O when the key's lease covers cost; otherwise it makes one store
// call (bounded by Config.StoreTimeout) or, when the store is unavailable,
// decides from a local degraded bucket. A rejection is a Decision with
// Allowed false; an error means the input was bad or the key has no plan.
func (l *Limiter) Allow(ctx context.Context, key string, cost int64) (d Decision, err error) {
	if err := checkKey(key); err != nil {
		return Decision{}, err
	}
	if cost <= 0 {
		return Decision{}, fmt.Errorf("%w: cost must be positive, got %d", ErrInvalidCost, cost)
	}
	h := maphash.String(l.seed, key)
	sh := l.shardOf(h)
	now := l.now()
	sh.mu.Lock()
	if e := sh.keys[key]; e != nil && e.epoch == l.epoch.Load() {
		if cost > e.limit {
			sh.mu.Unlock()
			return Decision{}, costError(cost, e.limit)
		}
		l.rollLocked(sh, key, e, now)
		if e.permits >= cost && l.leaseLive(e, now) {
			// The decision is written in place: copying it up through the
			// calls was a third of the fast path's time.
			l.spendLocked(sh, key, e, now, cost, &d)
			sh.mu.Unlock()
			return d, nil
		}
		if e.syncAt != 0 && !e.inDegraded && e.regionalAt(now) < e.refillTarget(cost) {
			// Even with every token refilled since the last sync the region
			// cannot afford a useful lease, so a store call would be wasted.
			l.rejectLocked(sh, key, e, now, cost, &d)
			sh.mu.Unlock()
			return d, nil
		}
	}
	sh.mu.Unlock()
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

// EndpointCost returns endpoint's weight: from Config.Costs, else
// Config.DefaultCost, else ErrUnknownEndpoint.
func (l *Limiter) EndpointCost(endpoint string) (int64, error) {
	if l.cfg.Costs != nil {
		if c, ok := l.cfg.Costs.Cost(endpoint); ok {
			return c, nil
		}
	}
	if l.cfg.DefaultCost == 0 {
		return 0, fmt.Errorf("%w: endpoint %q has no cost weight", ErrUnknownEndpoint, endpoint)
	}
	return l.cfg.DefaultCost, nil
}

func costError(cost, limit int64) error {
	return fmt.Errorf("%w: cost %d is above the plan's capacity %d", ErrCostExceedsCapacity, cost, limit)
}

func (l *Limiter) spendLocked(sh *shard, key string, e *entry, now, cost int64, d *Decision) {
	if !e.fits(cost) {
		sh.pending = append(sh.pending, e.takeUsage(key, l.cfg.Window))
	}
	e.permits -= cost
	e.remaining -= cost
	e.spent += uint32(cost)
	e.addDemand(cost)
	e.referenced = true
	sh.outstanding -= cost
	sh.allowed++
	e.decision(d, true, now, cost)
}

func (l *Limiter) rejectLocked(sh *shard, key string, e *entry, now, cost int64, d *Decision) {
	if !e.fits(cost) {
		sh.pending = append(sh.pending, e.takeUsage(key, l.cfg.Window))
	}
	e.rejected += uint32(cost)
	e.addDemand(cost)
	e.referenced = true
	sh.rejected++
	e.decision(d, false, now, cost)
}

// rollLocked starts a new accounting window when the key's current one has
// ended on the store's clock, moving the old window's deltas to pending.
func (l *Limiter) rollLocked(sh *shard, key string, e *entry, now int64) {
	sn := l.storeNanos(now)
	if sn < e.windowEnd {
		return
	}
	if e.hasUsage() {
		sh.pending = append(sh.pending, e.takeUsage(key, l.cfg.Window))
	}
	e.windowEnd = WindowStart(key, time.Unix(0, sn), l.cfg.Window).UnixNano() + int64(l.cfg.Window)
}

func (l *Limiter) processes() int {
	if l.cfg.Processes != nil {
		if n := l.cfg.Processes.Processes(); n >= 1 {
			return n
		}
	}
	return l.cfg.ProcessEstimate
}

func (l *Limiter) share(key string) float64 {
	if l.cfg.Shares == nil {
		return 1
	}
	s := l.cfg.Shares.Share(key)
	if !(s > 0) || s > 1 { // NaN, zero, negative or above one: not a share
		return 1
	}
	return s
}

// leaseCap is the largest lease one process may hold for a key: all the
// region's processes together hold at most AccuracyBudget of a horizon's
// worth of the region's rate.
func (l *Limiter) leaseCap(regionalRate float64, processes int) int64 {
	c := l.cfg.AccuracyBudget * regionalRate * l.cfg.AccuracyHorizon.Seconds() / float64(processes)
	if c < 1 {
		return 1
	}
	if c > math.MaxUint32 {
		return math.MaxUint32
	}
	return int64(c)
}

// allowSlow takes the store path: resolve the plan, serialise with other
// misses of the same key, then lease (or degrade).
func (l *Limiter) allowSlow(ctx context.Context, key string, h uint64, cost int64) (Decision, error) {
	plan, err := l.plans.Plan(key)
	if err != nil {
		return Decision{}, fmt.Errorf("region: plan for key %q: %w", key, err)
	}
	if err := plan.Validate(); err != nil {
		return Decision{}, fmt.Errorf("region: plan for key %q: %w", key, err)
	}
	limit := int64(plan.Capacity)
	if cost > limit {
		return Decision{}, costError(cost, limit)
	}
	share := l.share(key)
	procs := l.processes()
	epoch := l.epoch.Load()

	mu := &l.slow[h%slowStripes]
	mu.Lock()
	defer mu.Unlock()

	sh := l.shardOf(h)
	now := l.now()
	sh.mu.Lock()
	e := sh.keys[key]
	if e == nil {
		e = sh.insertLocked(key, l.cfg.Window)
	}
	invalidated := e.epoch != epoch || e.limit != limit
	if invalidated {
		// The plan or share changed: the lease was sized for other
		// parameters, so it ends now and its permits go back below.
		e.leaseLive = false
	}
	e.epoch, e.limit = epoch, limit
	e.rate, e.capacity = float32(plan.Rate*share), float32(plan.Capacity*share)
	e.referenced = true
	l.rollLocked(sh, key, e, now)

	// Another miss may have refilled the lease while this one waited.
	if e.permits >= cost && l.leaseLive(e, now) {
		var d Decision
		l.spendLocked(sh, key, e, now, cost, &d)
		sh.mu.Unlock()
		return d, nil
	}
	if l.breaker.current() == BreakerClosed && e.syncAt != 0 && e.leaseLive && e.regionalAt(now) < e.refillTarget(cost) {
		var d Decision
		l.rejectLocked(sh, key, e, now, cost, &d)
		sh.mu.Unlock()
		return d, nil
	}
	probe := l.breaker.current() != BreakerClosed
	if !l.breaker.allow(now) {
		d := l.degradedLocked(sh, key, e, now, cost, share, procs, plan)
		sh.mu.Unlock()
		return d, nil
	}
	if probe {
		// The breaker let this miss probe the store: first with a call that
		// writes nothing, so that probing a store that is still slow neither
		// loses a lease nor resets the bucket's refill clock.
		e.busy = true
		sh.mu.Unlock()
		_, lat, err := l.callStore(ctx, LeaseRequest{Key: key, Rate: plan.Rate * share, Capacity: plan.Capacity * share, Spread: 1})
		sh.mu.Lock()
		e.busy = false
		now = l.now()
		if err != nil || lat > l.cfg.StoreTimeout {
			l.breaker.failure(now)
			d := l.degradedLocked(sh, key, e, now, cost, share, procs, plan)
			sh.mu.Unlock()
			return d, nil
		}
		l.breaker.success()
	}

	// Size the lease (seed R2): double it when the last one ran out before
	// its TTL, halve it when one expired mostly unspent, keep it when one
	// expired mostly spent (the key's rate fits the lease).
	switch {
	case invalidated:
	case e.syncAt != 0 && l.leaseLive(e, now):
		e.nextLease = uint32(min(int64(e.nextLease)*2, math.MaxUint32))
	case e.permits > int64(e.nextLease)/2:
		e.nextLease = max(e.nextLease/2, 1)
	}
	leaseCap := l.leaseCap(plan.Rate*share, procs)
	want := max(cost, min(int64(e.nextLease), leaseCap))
	e.nextLease = uint32(min(int64(e.nextLease), leaseCap))
	ret := e.permits
	e.permits = 0
	e.busy = true
	var debt int64
	if b := sh.buckets[key]; b != nil && l.breaker.healthy() {
		debt = b.debt
	}
	demand := int64(e.demand)
	sh.mu.Unlock()

	req := LeaseRequest{
		Key:      key,
		Rate:     plan.Rate * share,
		Capacity: plan.Capacity * share,
		Want:     want,
		Min:      cost,
		Return:   ret,
		Spread:   int64(procs),
		Debt:     debt,
		Demand:   demand,
		Grace:    l.cfg.DebtGrace,
	}
	rep, lat, err := l.callStore(ctx, req)

	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.busy = false
	now = l.now()
	if err != nil {
		// The returned permits may or may not have reached the store; they
		// count as lost, which under-admits and is safe.
		sh.outstanding -= ret
		l.breaker.failure(now)
		return l.degradedLocked(sh, key, e, now, cost, share, procs, plan), nil
	}
	if lat > l.cfg.StoreTimeout {
		// The store answered, but slower than allowed: use the answer and
		// count the call against the store's health.
		l.breaker.failure(now)
	} else {
		l.breaker.success()
	}
	if !e.fits(rep.Granted + ret) {
		sh.pending = append(sh.pending, e.takeUsage(key, l.cfg.Window))
	}
	if e.inDegraded {
		// Charged with this call; what the bucket allowed since then is
		// still owed.
		if b := sh.buckets[key]; b != nil && b.debt > debt {
			b.debt -= debt
		} else {
			delete(sh.buckets, key)
			e.inDegraded = false
		}
	}
	keep := 1.0
	if e.syncAt != 0 {
		keep = math.Exp2(-float64(now-e.syncAt) / float64(l.cfg.LocalShareHalfLife))
	}
	e.permits = rep.Granted
	e.leaseLive = true
	e.remaining = int64(rep.Tokens) + rep.Granted
	e.syncAt = now
	e.leased += int32(rep.Granted - ret)
	e.demand -= uint32(demand) // what was counted meanwhile waits for the next call
	e.observeDemand(demand, rep.DemandTotal, keep)
	sh.outstanding += rep.Granted - ret
	var d Decision
	if e.permits >= cost {
		l.spendLocked(sh, key, e, now, cost, &d)
	} else {
		l.rejectLocked(sh, key, e, now, cost, &d)
	}
	return d, nil
}

// callStore makes one store call under the hard timeout and learns the
// clock offset from its reply.
func (l *Limiter) callStore(ctx context.Context, req LeaseRequest) (LeaseReply, time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
	t0 := l.clock.Now()
	rep, err := l.store.Lease(cctx, req)
	t1 := l.clock.Now()
	cancel()
	lat := t1.Sub(t0)
	l.storeCalls.Add(1)
	if l.cfg.Observer != nil {
		l.cfg.Observer.StoreCall(lat, req.Want, rep.Granted, err)
	}
	if err != nil {
		return LeaseReply{}, lat, err
	}
	if rep.Granted < 0 || rep.Granted > req.Want {
		return LeaseReply{}, lat, fmt.Errorf("%w: store granted %d of %d asked", ErrStoreUnavailable, rep.Granted, req.Want)
	}
	mid := l.startWall + int64(t0.Sub(l.start)) + int64(lat)/2
	l.offset.observe(rep.StoreTime.UnixNano() - mid)
	return rep, lat, nil
}

// degradedLocked decides from the key's local degraded bucket (seed R1),
// flagged. It starts from this process's local share of what the region had
// left, refills at rate × region share × max(local share, floor), and may
// hold up to the region's capacity (capacity × region share): over an
// outage of T a process admits at most max(local share, floor) × region
// share × (capacity + rate·T), as if the capacity were split too, but a key
// whose region part of the capacity is smaller than one request (a low
// share split over several processes) is not rejected for the whole outage
// because its bucket cannot hold one request. A key the process never synced
// starts from the region's capacity.
func (l *Limiter) degradedLocked(sh *shard, key string, e *entry, now, cost int64, share float64, procs int, plan Plan) Decision {
	floor := math.Max(l.cfg.MinLocalShare, l.cfg.FloorFraction/float64(procs))
	local := math.Max(e.localShare(procs, l.cfg.LocalSharePrior), floor)
	rate, capacity := plan.Rate*share*math.Min(1, local), plan.Capacity*share
	b := sh.buckets[key]
	if b == nil {
		// Entering degraded mode: start from this process's part of what the
		// region had left, not from a full bucket, so that a key that was
		// exhausted stays exhausted.
		tokens := capacity
		if e.syncAt != 0 {
			tokens = math.Min(capacity, e.regionalAt(now)*math.Min(1, local))
		}
		b = &degradedBucket{tokens: tokens}
		if sh.buckets == nil {
			sh.buckets = make(map[string]*degradedBucket)
		}
		sh.buckets[key] = b
		e.inDegraded = true
	} else {
		b.tokens = math.Min(capacity, b.tokens+rate*float64(now-b.at)/1e9)
	}
	b.at = now
	if !e.fits(cost) {
		sh.pending = append(sh.pending, e.takeUsage(key, l.cfg.Window))
	}
	e.referenced = true
	d := Decision{Limit: e.limit, Degraded: true, Path: PathDegraded}
	if e.syncAt != 0 {
		d.Stale = time.Duration(now - e.syncAt)
	}
	e.addDemand(cost)
	if b.tokens >= float64(cost) {
		b.tokens -= float64(cost)
		b.debt += cost
		e.spent += uint32(cost)
		e.degraded += uint32(cost)
		sh.allowed++
		sh.degraded++
		d.Allowed = true
	} else {
		e.rejected += uint32(cost)
		sh.rejected++
		sh.degraded++
		d.RetryAfter = retryAfter(float64(cost)-b.tokens, rate)
	}
	d.Remaining = int64(b.tokens)
	d.Reset = refillTime(capacity-b.tokens, rate)
	return d
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
func (l *Limiter) InvalidateAll() { l.epoch.Add(1) }

func mapHash(l *Limiter, key string) uint64 { return maphash.String(l.seed, key) }

// leaseLive reports whether e's lease may still be spent at now: it was not
// ended early and LeaseTTL has not passed since it was granted.
func (l *Limiter) leaseLive(e *entry, now int64) bool {
	return e.leaseLive && now < e.syncAt+int64(l.cfg.LeaseTTL)
}
