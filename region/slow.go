package region

import (
	"context"

	"github.com/quotaplatform/quota/region/store"
)

// allowSlow takes the store path: resolve the plan, serialise with other
// misses of the same key, attach the key's state, do the store work the
// check needs (docs/design.md [leasing]), and decide from what it came
// to: a lease, an exact call's answer, or degraded mode (docs/design.md
// [degraded-mode]). The store work and the degraded verdict return what
// they came to; one decision applies it to the entry (decideMissLocked).
func (l *Limiter) allowSlow(ctx context.Context, key string, h uint64, cost int64) (Decision, error) {
	m, err := l.leases.newMiss(key, h, cost)
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
	invalidated := l.leases.attachLocked(&m)
	r := renewal{out: leaseLocal, now: now}
	if m.plan.Exact() || !l.leases.decidableLocked(&m, now) {
		r = l.leases.renewLocked(ctx, &m, now, invalidated)
	}
	var v degradedVerdict
	if r.degraded() {
		v = l.degraded.verdictLocked(&m, r)
	}
	return l.leases.decideMissLocked(&m, r, v), nil
}

// decidableLocked reports whether a miss can be decided without the
// store: from a lease another miss fetched while this one waited, or as a
// rejection when even with every token refilled since the last sync the
// region cannot afford a useful lease, or while a quota of the key is
// spent (until a quota call may find room).
func (ls *leases) decidableLocked(m *miss, now int64) bool {
	e := m.e
	closed := ls.l.breaker.current() == BreakerClosed
	return e.permits >= m.cost && ls.live(e, now) ||
		closed && e.syncAt != 0 && e.leaseLive && e.regionalAt(now) < e.refillTarget(m.cost) ||
		closed && m.q.spent(now)
}

// renewLocked does the store work of a miss that could not be decided
// locally: one exact call for an exact plan, else a new lease (and quota
// lease), unless the store may not be called. The shard is unlocked for
// the calls.
func (ls *leases) renewLocked(ctx context.Context, m *miss, now int64, invalidated bool) renewal {
	switch {
	case m.plan.Exact():
		return ls.exactLocked(ctx, m, now)
	case ls.l.degraded.refusedLocked(m, now):
		return renewal{out: leaseUnavailable, now: now}
	}
	now, ok := ls.l.calls.mayCallLocked(ctx, m, now)
	switch {
	case !ok:
		return renewal{out: leaseUnavailable, now: now}
	case m.q != nil:
		return ls.l.quotas.leaseLocked(ctx, m, now, invalidated)
	}
	return ls.leaseLocked(ctx, m, now, invalidated)
}

// renewal is what a miss's store work came to, for its decision to apply
// (decideMissLocked). A grant is applied there, not when the call
// returns: a key with quotas makes a quota call after its lease call, and
// a check on the fast path meanwhile must find no rate permit that no
// quota permit covers.
type renewal struct {
	out leaseOutcome
	now int64 // limiter time after the calls
	// granted: the store granted req's call rep, to be applied to the
	// entry (grantLocked).
	granted bool
	req     store.LeaseRequest
	rep     store.LeaseReply
	// split: the key's rate and quota leases were taken apart for the
	// calls, and permits is the entry's part of them once the grant is
	// applied (quotaState.split).
	split   bool
	permits int64
}

// degraded reports whether the miss is decided in degraded mode.
func (r renewal) degraded() bool { return r.out == leaseUnavailable || r.out == leaseRefused }

// leaseOutcome is what a miss's store work came to.
type leaseOutcome uint8

const (
	leaseLocal       leaseOutcome = iota // no store work: decidableLocked found the decision
	leaseGranted                         // a lease call answered: decide from the entry's permits
	leaseAnswered                        // an exact call answered: likewise, keeping no lease
	leaseUnavailable                     // the store was not called or did not answer: decide degraded
	leaseRefused                         // the store refused the key's call: degraded (degradedMode.verdictLocked)
	leaseFailClosed                      // an exact plan's call could not decide: reject until the next probe
)
