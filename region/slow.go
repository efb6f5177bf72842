package region

import (
	"context"
	"math"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// allowSlow takes the store path: resolve the plan, serialise with other
// misses of the same key, then decide from what another miss fetched, or
// call the store (docs/design.md [leasing]) and decide from what the call
// came to: a lease, or degraded mode (docs/design.md [degraded-mode]).
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
	var d Decision
	if !m.plan.Exact() && l.decideLocalLocked(&m, now, &d) {
		return d, nil
	}
	out, now := l.renewLocked(ctx, &m, now, invalidated)
	return l.concludeLocked(&m, now, out), nil
}

// renewLocked does the store work of a miss that could not be decided
// locally: one exact call for an exact plan, else a new lease (and quota
// lease), unless the store may not be called. It returns what that came
// to and the limiter time after it. The shard is unlocked for the calls.
func (l *Limiter) renewLocked(ctx context.Context, m *miss, now int64, invalidated bool) (leaseOutcome, int64) {
	switch {
	case m.plan.Exact():
		return l.exactLocked(ctx, m, now)
	case l.refusedLocked(m, now):
		return leaseUnavailable, now
	}
	now, ok := l.mayCallStoreLocked(ctx, m, now)
	switch {
	case !ok:
		return leaseUnavailable, now
	case m.plan.HasQuotas():
		return l.leaseQuotaLocked(ctx, m, now, invalidated)
	}
	return l.leaseLocked(ctx, m, now, invalidated)
}

// concludeLocked decides a miss from what its store work came to: from
// the entry's new permits, or without the store (degradeLocked).
func (l *Limiter) concludeLocked(m *miss, now int64, out leaseOutcome) Decision {
	if out == leaseGranted {
		return l.decideFromPermitsLocked(m.sh, m, m.e, now)
	}
	return l.degradeLocked(m, now, out)
}

// refusedLocked reports whether the store refused the key's last call for
// a reason of the key's own (store.ErrStoreRejected) less than BreakerCooldown
// ago: until then the key is decided from its degraded bucket without a
// store call, so that a broken key costs one store call per cooldown, not
// one per decision.
func (l *Limiter) refusedLocked(m *miss, now int64) bool {
	b := m.sh.buckets[m.key]
	return b != nil && b.refusing(now, l.cfg.BreakerCooldown)
}

// leaseLocked makes the store call that returns the key's unspent permits,
// charges its degraded debt and leases anew, and applies the reply. It
// returns what the call came to and the limiter time after it. The shard
// is unlocked for the call.
func (l *Limiter) leaseLocked(ctx context.Context, m *miss, now int64, invalidated bool) (leaseOutcome, int64) {
	req := l.leaseRequestLocked(m, now, invalidated)
	m.sh.mu.Unlock()
	rep, lat, err := l.callStore(ctx, req)
	m.sh.mu.Lock()
	m.e.busy = false
	now = l.now()
	return l.applyLeaseReplyLocked(m, req, rep, lat, err, now), now
}

// leaseOutcome is what a miss's store work came to (renewLocked).
type leaseOutcome uint8

const (
	leaseGranted     leaseOutcome = iota // the reply was applied: decide from the entry's permits
	leaseUnavailable                     // the store was not called or did not answer: decide degraded
	leaseRefused                         // the store refused the key's call: degraded, and see degradeLocked
	leaseFailClosed                      // an exact plan's call could not decide: reject (failClosedLocked)
)

// applyLeaseReplyLocked applies a lease call's outcome to the entry: it
// tells the breaker, and on a reply returns the unspent permits, charges
// the degraded debt and takes the new lease.
func (l *Limiter) applyLeaseReplyLocked(m *miss, req store.LeaseRequest, rep store.LeaseReply, lat time.Duration, err error, now int64) leaseOutcome {
	e, sh := m.e, m.sh
	if err != nil && store.IsTransient(err) {
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
		// Refused: the call wrote nothing, so the permits it returned are
		// lost (under-admission).
		sh.outstanding -= req.Return
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

// leaseRequestLocked sizes the next lease and takes the current one back
// for the call (the entry is busy until the call returns). The call carries
// the key's degraded debt only when the last store call succeeded
// (docs/design.md [degraded-debt]), and the demand counted since the last
// call.
func (l *Limiter) leaseRequestLocked(m *miss, now int64, invalidated bool) store.LeaseRequest {
	var debt int64
	if b := m.sh.buckets[m.key]; b != nil && l.breaker.healthy() {
		debt = b.debt
	}
	capCost := l.leaseCap(m.rate(), m.procs)
	e := m.e
	live := l.leaseLive(e, now)
	want := e.sizeLease(m.cost, capCost, live, invalidated)
	return store.LeaseRequest{
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
