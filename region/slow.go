package region

import "context"

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
	if out != leaseGranted && out != leaseAnswered {
		// The store granted nothing: decide without it.
		return l.degradeLocked(&m, now, out), nil
	}
	if out == leaseAnswered {
		l.grantLocked(&m, m.exact.req, m.exact.rep, now)
		m.e.leaseLive = false // nothing is leased: every check calls the store
	}
	return l.decideFromPermitsLocked(m.sh, &m, m.e, now), nil
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
		q := quotaLockedState(m.sh, m.key, m.e)
		return l.leaseQuotaLocked(ctx, m, q, now, invalidated)
	}
	return l.leaseLocked(ctx, m, now, invalidated)
}

// leaseOutcome is what a miss's store work came to (renewLocked).
type leaseOutcome uint8

const (
	leaseGranted     leaseOutcome = iota // the reply was applied: decide from the entry's permits
	leaseAnswered                        // an exact call answered: apply m.exact's grant, then decide likewise
	leaseUnavailable                     // the store was not called or did not answer: decide degraded
	leaseRefused                         // the store refused the key's call: degraded, and see degradeLocked
	leaseFailClosed                      // an exact plan's call could not decide: reject (failClosedLocked)
)
