package region

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// miss is one decision on the slow path: the key, its cost, and what was
// resolved for it before its stripe was taken.
type miss struct {
	key   string
	cost  int64
	plan  Plan    // the key's plan, as the PlanResolver gave it
	share float64 // the region's share of the key, in (0, 1]
	procs int     // the processes sharing the region's store
	epoch uint32  // Limiter.epoch when the plan was resolved
	sh    *shard  // the key's shard
	e     *entry  // the key's entry; set by attachLocked
}

// rate and capacity are the region's bucket: the plan scaled by the share.
func (m *miss) rate() float64     { return m.plan.Rate * m.share }
func (m *miss) capacity() float64 { return m.plan.Capacity * m.share }

// allowSlow takes the store path: resolve the plan, serialise with other
// misses of the same key, then decide from what another miss fetched, lease
// (docs/design.md [leasing]), or degrade (docs/design.md [degraded-mode]).
func (l *Limiter) allowSlow(ctx context.Context, key string, h uint64, cost int64) (Decision, error) {
	m, err := l.newMiss(key, h, cost)
	if err != nil {
		return Decision{}, err
	}
	mu := &l.slow[h%slowStripes]
	mu.Lock()
	defer mu.Unlock()

	// The shard is locked on every return; the store calls below unlock it
	// for their duration.
	m.sh.mu.Lock()
	defer m.sh.mu.Unlock()
	now := l.now()
	invalidated := l.attachLocked(&m, now)
	if m.plan.Exact() {
		return l.exactLocked(ctx, &m, now), nil
	}
	var d Decision
	if l.decideLocalLocked(&m, now, &d) {
		return d, nil
	}
	if l.refusedLocked(&m, now) {
		return l.degradedLocked(&m, now), nil
	}
	now, ok := l.mayCallStoreLocked(ctx, &m, now)
	if !ok {
		return l.degradedLocked(&m, now), nil
	}
	if m.plan.HasQuotas() {
		return l.leaseQuotaLocked(ctx, &m, now, invalidated), nil
	}
	return l.leaseLocked(ctx, &m, now, invalidated), nil
}

// newMiss resolves key's plan, share and process count.
func (l *Limiter) newMiss(key string, h uint64, cost int64) (miss, error) {
	plan, err := l.plans.Plan(key)
	if err != nil {
		return miss{}, fmt.Errorf("region: plan for key %q: %w", key, err)
	}
	if err := plan.Validate(); err != nil {
		return miss{}, fmt.Errorf("region: plan for key %q: %w", key, err)
	}
	if limit := int64(plan.Capacity); cost > limit {
		return miss{}, costError(cost, limit)
	}
	return miss{
		key:   key,
		cost:  cost,
		plan:  plan,
		share: l.share(key),
		procs: l.processes(),
		epoch: l.epoch.Load(),
		sh:    l.shardOf(h),
	}, nil
}

// attachLocked finds or inserts the key's entry, gives it the resolved plan
// and rolls its window. It reports whether the entry's plan or epoch
// changed, which ended its lease.
func (l *Limiter) attachLocked(m *miss, now int64) (invalidated bool) {
	e := m.sh.getLocked(m.key)
	if e == nil {
		e = m.sh.insertLocked(m.key, l.cfg.Window)
	}
	m.e = e
	if e.plan != nil && e.plan.Shadow != m.plan.Shadow && e.hasUsage() {
		// The rejected delta means would-reject cost under a shadow plan:
		// hand it over under the plan that counted it.
		m.sh.pending = append(m.sh.pending, e.takeUsage(m.key, l.cfg.Window))
	}
	ref := e.plan
	if ref == nil || ref.Plan != m.plan {
		ref = l.sharedPlan(m.plan)
	}
	invalidated = e.setPlan(ref, m.share, m.epoch)
	if e.quota && !m.plan.HasQuotas() {
		l.dropQuotaLocked(m.sh, m.key, e)
	}
	if !e.quota && m.plan.HasQuotas() {
		quotaLockedState(m.sh, m.key, e)
	}
	if sn := l.storeNanos(now); sn >= e.windowEnd {
		l.rollLocked(m.sh, m.key, e, sn)
	}
	return invalidated
}

// decideLocalLocked decides without the store when it can: from a lease
// another miss fetched while this one waited, or as a rejection when even
// with every token refilled since the last sync the region cannot afford a
// useful lease. It reports whether it wrote d.
func (l *Limiter) decideLocalLocked(m *miss, now int64, d *Decision) bool {
	e := m.e
	if e.permits >= m.cost && l.leaseLive(e, now) {
		l.spendLocked(m.sh, m.key, e, now, m.cost, d)
		return true
	}
	if l.breaker.current() == BreakerClosed && e.syncAt != 0 && e.leaseLive && e.regionalAt(now) < e.refillTarget(m.cost) {
		l.rejectLocked(m.sh, m.key, e, now, m.cost, d)
		return true
	}
	return e.quota && l.breaker.current() == BreakerClosed && l.quotaOutLocked(m.sh, m.key, e, now, m.cost, d)
}

// refusedLocked reports whether the store refused the key's last call for
// a reason of the key's own (ErrStoreRejected) less than BreakerCooldown
// ago: until then the key is decided from its degraded bucket without a
// store call, so that a broken key costs one store call per cooldown, not
// one per decision.
func (l *Limiter) refusedLocked(m *miss, now int64) bool {
	b := m.sh.buckets[m.key]
	return b != nil && b.refusing(now, l.cfg.BreakerCooldown)
}

// mayCallStoreLocked asks the breaker whether this miss may call the store.
// When the breaker lets it probe, it probes first with a call that writes
// nothing, so that probing a store that is still slow neither loses a lease
// nor resets the bucket's refill clock; the shard is unlocked for the call.
// It returns the limiter time after any call.
func (l *Limiter) mayCallStoreLocked(ctx context.Context, m *miss, now int64) (int64, bool) {
	probe := l.breaker.current() != BreakerClosed
	if probe && l.bgProbes.Load() {
		return now, false // Run probes in the background
	}
	if !l.breaker.allow(now) {
		return now, false
	}
	if !probe {
		return now, true
	}
	m.e.busy = true
	m.sh.mu.Unlock()
	ok := l.probe(ctx, m.key, m.rate(), m.capacity())
	m.sh.mu.Lock()
	m.e.busy = false
	return l.now(), ok
}

// leaseLocked makes the store call that returns the key's unspent permits,
// charges its degraded debt and leases anew, then decides from the reply;
// when the call fails it decides in degraded mode. The shard is unlocked for
// the call.
func (l *Limiter) leaseLocked(ctx context.Context, m *miss, now int64, invalidated bool) Decision {
	req := l.leaseRequestLocked(m, now, invalidated)
	m.sh.mu.Unlock()
	rep, lat, err := l.callStore(ctx, req)
	m.sh.mu.Lock()
	m.e.busy = false
	now = l.now()
	switch l.applyLeaseReplyLocked(m, req, rep, lat, err, now) {
	case leaseUnavailable:
		return l.degradedLocked(m, now)
	case leaseRefused:
		return l.refusedCallLocked(m, now, req)
	}
	return l.decideFromPermitsLocked(m.sh, m, m.e, now)
}

// leaseOutcome is what a lease call's reply did to the entry
// (applyLeaseReplyLocked).
type leaseOutcome uint8

const (
	leaseGranted     leaseOutcome = iota // the reply was applied: a new lease
	leaseUnavailable                     // the store did not answer: decide degraded
	leaseRefused                         // the store refused the key's call: refusedCallLocked
)

// applyLeaseReplyLocked applies a lease call's outcome to the entry: it
// tells the breaker, and on a reply returns the unspent permits, charges
// the degraded debt and takes the new lease.
func (l *Limiter) applyLeaseReplyLocked(m *miss, req LeaseRequest, rep LeaseReply, lat time.Duration, err error, now int64) leaseOutcome {
	e, sh := m.e, m.sh
	if err != nil && isTransient(err) {
		// The returned permits may or may not have reached the store; they
		// count as lost, which under-admits and is safe.
		sh.outstanding -= req.Return
		l.breaker.failure(now)
		return leaseUnavailable
	}
	if lat > l.cfg.StoreTimeout {
		// The store answered, but slower than allowed: use the answer and
		// count the call against the store's health.
		l.breaker.failure(now)
	} else {
		l.breaker.success()
	}
	if err != nil {
		return leaseRefused
	}
	sh.makeRoomLocked(m.key, e, rep.Granted+req.Return, l.cfg.Window)
	if e.inDegraded {
		l.settleDebtLocked(m, req.Debt)
	}
	e.applyGrant(rep, req.Return, req.Demand, now, l.cfg.LocalShareHalfLife)
	sh.outstanding += rep.Granted - req.Return
	return leaseGranted
}

// refusedCallLocked decides after the store refused the key's call for a
// reason of the key's own (ErrStoreRejected: a bucket key of the wrong type,
// arguments the script refused). The store answered, and the breaker
// counted it as any answer (a success unless it came too slowly): only this
// key is decided in degraded mode, flagged, and it tries the store again
// after BreakerCooldown (refusedLocked). A refused
// call wrote nothing: the permits it returned are lost (under-admission),
// and the debt it carried stays with the key's degraded bucket.
func (l *Limiter) refusedCallLocked(m *miss, now int64, req LeaseRequest) Decision {
	m.sh.outstanding -= req.Return
	d := l.degradedLocked(m, now)
	m.sh.buckets[m.key].refusedAt = now
	return d
}

// leaseRequestLocked sizes the next lease and takes the current one back
// for the call (the entry is busy until the call returns). The call carries
// the key's degraded debt only when the last store call succeeded
// (docs/design.md [degraded-debt]), and the demand counted since the last
// call.
func (l *Limiter) leaseRequestLocked(m *miss, now int64, invalidated bool) LeaseRequest {
	e := m.e
	want := e.sizeLease(m.cost, l.leaseCap(m.rate(), m.procs), l.leaseLive(e, now), invalidated)
	var debt int64
	if b := m.sh.buckets[m.key]; b != nil && l.breaker.healthy() {
		debt = b.debt
	}
	return LeaseRequest{
		Key:      m.key,
		Rate:     m.rate(),
		Capacity: m.capacity(),
		Want:     want,
		Min:      m.cost,
		Return:   e.takeLease(),
		Spread:   int64(m.procs),
		Debt:     debt,
		Demand:   int64(e.demand),
		Grace:    l.cfg.DebtGrace,
	}
}

// settleDebtLocked leaves the key's degraded bucket owing what it allowed
// after the debt a successful store call charged; a bucket that owes
// nothing more is dropped and the key leaves degraded mode.
func (l *Limiter) settleDebtLocked(m *miss, charged int64) {
	if b := m.sh.buckets[m.key]; b != nil && b.debt > charged {
		b.debt -= charged
		b.refusedAt = 0
		return
	}
	delete(m.sh.buckets, m.key)
	m.e.inDegraded = false
}

// probe makes a store call that writes nothing, and reports whether the
// store answered within the timeout, telling the breaker either way. A
// refusal about the probe's key (ErrStoreRejected) is an answer.
func (l *Limiter) probe(ctx context.Context, key string, rate, capacity float64) bool {
	_, lat, err := l.callStore(ctx, LeaseRequest{Key: key, Rate: rate, Capacity: capacity, Spread: 1})
	if isTransient(err) || lat > l.cfg.StoreTimeout {
		l.breaker.failure(l.now())
		return false
	}
	l.breaker.success()
	return true
}

// endStoreSpan records a store call on its span and ends it.
func endStoreSpan(span trace.Span, req LeaseRequest, rep LeaseReply, lat time.Duration, err error) {
	span.SetAttributes(attribute.Int64("quota.want", req.Want), attribute.Int64("quota.granted", rep.Granted),
		attribute.Int64("quota.return", req.Return), attribute.Int64("quota.latency_us", lat.Microseconds()))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "store call failed")
	}
	span.End()
}

// callStore makes one store call under the hard timeout and learns the
// clock offset from its reply (docs/design.md [store-clock]). It counts the
// calls the store refused for their key (ErrStoreRejected); telling the
// breaker is the caller's.
func (l *Limiter) callStore(ctx context.Context, req LeaseRequest) (LeaseReply, time.Duration, error) {
	return l.callStoreWithin(ctx, req, l.cfg.StoreTimeout)
}

// callStoreWithin is callStore under timeout instead of StoreTimeout.
func (l *Limiter) callStoreWithin(ctx context.Context, req LeaseRequest, timeout time.Duration) (LeaseReply, time.Duration, error) {
	var span trace.Span
	if l.cfg.Tracer != nil {
		ctx, span = l.cfg.Tracer.Start(ctx, "quota.store.call", trace.WithSpanKind(trace.SpanKindClient))
	}
	// A MemoryStore answers without I/O, so a deadline would only cost the
	// slow path a timer and the request context's cancellation bookkeeping
	// (about 300 B, 6 % of the embedded daemon's allocation per check at
	// 0.5 checks/s per key).
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if !l.inMemory {
		cctx, cancel = context.WithTimeout(ctx, timeout)
	}
	t0 := l.clock.Now()
	rep, err := l.store.Lease(cctx, req)
	t1 := l.clock.Now()
	cancel()
	lat := t1.Sub(t0)
	if span != nil {
		endStoreSpan(span, req, rep, lat, err)
	}
	l.storeCalls.Add(1)
	if l.cfg.Observer != nil {
		l.cfg.Observer.StoreCall(lat, req.Want, rep.Granted, err)
	}
	if err != nil {
		if !isTransient(err) {
			l.keyErrors.Add(1)
		}
		return LeaseReply{}, lat, err
	}
	if rep.Granted < 0 || rep.Granted > req.Want {
		return LeaseReply{}, lat, fmt.Errorf("%w: store granted %d of %d asked", ErrStoreUnavailable, rep.Granted, req.Want)
	}
	mid := l.startWall + int64(t0.Sub(l.start)) + int64(lat)/2
	l.offset.observe(rep.StoreTime.UnixNano() - mid)
	return rep, lat, nil
}

// decideFromPermitsLocked spends m's cost from the entry's permits when
// they cover it, and rejects it otherwise: what a decision comes to once a
// store reply has been applied to the entry.
func (l *Limiter) decideFromPermitsLocked(sh *shard, m *miss, e *entry, now int64) Decision {
	var d Decision
	if e.permits >= m.cost {
		l.spendLocked(sh, m.key, e, now, m.cost, &d)
	} else {
		l.rejectLocked(sh, m.key, e, now, m.cost, &d)
	}
	return d
}
