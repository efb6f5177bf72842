package region

import (
	"context"
	"math"
	"time"
)

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
