package region

import (
	"math"
	"time"
)

// degradedMode is the capability that decides checks while the store is
// unavailable or refuses a key (docs/design.md [degraded-mode]): each
// such key's local degraded bucket (shard.buckets, beside the entry, so
// that an entry stays its size), the verdict by the plan's failure policy,
// and the debt the bucket's grants leave for the store. It calls no store.
type degradedMode struct{ l *Limiter }

// debtLocked is what the key's degraded bucket allowed, for a lease call
// to charge: only when the last store call succeeded (docs/design.md
// [degraded-debt]).
func (dm *degradedMode) debtLocked(m *miss) int64 {
	if b := m.sh.buckets[m.key]; b != nil && dm.l.breaker.healthy() {
		return b.debt
	}
	return 0
}

// degradedVerdict is what a check decided without the store comes to, for
// decideMissLocked to apply to the entry (degradedMode.decisionLocked).
type degradedVerdict struct {
	policy   FailurePolicy
	allowed  bool
	quotaOut bool    // refused because the quotas' degraded budget cannot afford it
	tokens   float64 // the key's degraded bucket after the check
	// rate and capacity are the degraded bucket's: its refill and size.
	rate, capacity float64
}

// verdictLocked decides a miss while the store is unavailable or
// refused the key's call (r), by the plan's failure policy
// (docs/design.md [plan-semantics]): FailOpen allows, FailClosed rejects
// until the breaker's next probe, and FailDegraded decides from the key's
// local degraded bucket (docs/design.md [degraded-share]). It starts from
// this process's local share of what the region had left, refills at rate
// × region share × max(local share, floor), and may hold up to the
// region's capacity (capacity × region share): over an outage of T a
// process admits at most max(local share, floor) × region share ×
// (capacity + rate·T), as if the capacity were split too, but a key whose
// region part of the capacity is smaller than one request (a low share
// split over several processes) is not rejected for the whole outage
// because its bucket cannot hold one request. A key the process never
// synced starts from the region's capacity.
//
// After the store refused the key's call for a reason of the key's own
// (leaseRefused: store.ErrStoreRejected, a bucket key of the wrong type,
// arguments the script refused), only this key is degraded: the store
// answered, and the breaker counted it as any answer. Such a key tries
// the store again after BreakerCooldown (refusedLocked), and the debt its
// call carried stays with its degraded bucket.
func (dm *degradedMode) verdictLocked(m *miss, r renewal) degradedVerdict {
	e, cost, now := m.e, m.cost, r.now
	floor := math.Max(dm.l.cfg.MinLocalShare, dm.l.cfg.FloorFraction/float64(m.procs))
	local := math.Min(1, math.Max(e.localShare(m.procs, dm.l.cfg.LocalSharePrior), floor))
	v := degradedVerdict{policy: e.plan.Policy(), rate: m.rate() * local, capacity: m.capacity()}
	// Every policy keeps the bucket: it marks the key as deciding without
	// the store, and holds a refused key's time.
	b := dm.bucketLocked(m, now, local, v.rate, v.capacity)
	if r.out == leaseRefused {
		b.refusedAt = now
	}
	if v.policy == FailClosed {
		return v
	}
	// The quotas' degraded budget: FailOpen counts the check against it
	// whatever it holds, FailDegraded spends it only when the bucket holds
	// the cost.
	open := v.policy == FailOpen
	quotaOK := true
	if m.q != nil && (open || b.tokens >= float64(cost)) {
		quotaOK = dm.l.quotas.degradedLocked(m, local, open)
	}
	switch {
	case open:
		// Allowed and flagged; nothing is charged back to the bucket
		// (docs/design.md [plan-semantics]), but the quotas count it.
		v.allowed = true
	case b.tokens >= float64(cost) && quotaOK:
		b.tokens -= float64(cost)
		b.debt += cost
		v.allowed = true
	}
	v.tokens, v.quotaOut = b.tokens, !quotaOK
	return v
}

// decideLocked decides a check with a request id while the store is
// unavailable (AllowRequest), as allowSlow does any check.
func (dm *degradedMode) decideLocked(m *miss, now int64) Decision {
	r := renewal{out: leaseUnavailable, now: now}
	return dm.l.leases.decideMissLocked(m, r, dm.verdictLocked(m, r))
}

// bucketLocked returns the key's degraded bucket refilled to now,
// creating it when the key enters degraded mode. local is this process's
// share of the region's traffic, floor applied, at most 1.
func (dm *degradedMode) bucketLocked(m *miss, now int64, local, rate, capacity float64) *degradedBucket {
	e, sh := m.e, m.sh
	b := sh.buckets[m.key]
	if b != nil {
		b.tokens = math.Min(capacity, b.tokens+rate*float64(now-b.at)/1e9)
		b.at = now
		return b
	}
	// Entering degraded mode: start from this process's part of what the
	// region had left, not from a full bucket, so that a key that was
	// exhausted stays exhausted.
	tokens := capacity
	if e.syncAt != 0 {
		tokens = math.Min(capacity, e.regionalAt(now)*local)
	}
	b = &degradedBucket{tokens: tokens, at: now}
	if sh.buckets == nil {
		sh.buckets = make(map[string]*degradedBucket)
	}
	sh.buckets[m.key] = b
	e.inDegraded = true
	return b
}

// decisionLocked applies a degraded verdict to the entry: the
// check is flagged Degraded and counted, allowed or refused as v says
// (docs/design.md [plan-semantics]). A refusal that only the store can
// lift (FailClosed, every failure of an exact plan, a spent degraded
// quota budget) waits until the breaker's next probe.
func (dm *degradedMode) decisionLocked(m *miss, v degradedVerdict, now int64) Decision {
	e, sh, cost := m.e, m.sh, m.cost
	sh.makeRoomLocked(m.key, e, cost, dm.l.cfg.Window)
	e.referenced = true
	d := Decision{Limit: e.limit(), plan: e.plan, Degraded: true, Path: PathDegraded, Remaining: int64(v.tokens)}
	if e.syncAt != 0 {
		d.Stale = time.Duration(now - e.syncAt)
	}
	e.addDemand(cost)
	sh.degraded++
	switch {
	case v.allowed:
		e.spent += cost
		e.degraded += cost
		sh.allowed++
		e.plan.stats.degradedAllowed.Add(1)
		d.Allowed = true
		if v.policy == FailOpen {
			return d // nothing is charged back to the bucket: Reset stays 0
		}
	default:
		d.RetryAfter = retryAfter(float64(cost)-v.tokens, v.rate)
		if v.policy == FailClosed || v.quotaOut {
			d.RetryAfter = max(dm.l.breaker.untilProbe(now), time.Millisecond)
		}
		e.plan.stats.degradedRejected.Add(1)
		refuseLocked(sh, e, cost, &d)
		if v.policy == FailClosed {
			return d // no degraded budget to report
		}
	}
	d.quotaOut = v.quotaOut
	d.Reset = refillTime(v.capacity-v.tokens, v.rate)
	if e.quota {
		dm.l.quotas.degradedViewLocked(m, &d)
	}
	return d
}

// settleDebtLocked leaves the key's degraded bucket owing what it allowed
// after the debt a successful store call charged; a bucket that owes
// nothing more is dropped and the key leaves degraded mode.
func (dm *degradedMode) settleDebtLocked(m *miss, charged int64) {
	if b := m.sh.buckets[m.key]; b != nil && b.debt > charged {
		b.debt -= charged
		b.refusedAt = 0
		return
	}
	delete(m.sh.buckets, m.key)
	m.e.inDegraded = false
}

// refusedLocked reports whether the store refused the key's last call for
// a reason of the key's own (store.ErrStoreRejected) less than BreakerCooldown
// ago: until then the key is decided from its degraded bucket without a
// store call, so that a broken key costs one store call per cooldown, not
// one per decision.
func (dm *degradedMode) refusedLocked(m *miss, now int64) bool {
	b := m.sh.buckets[m.key]
	return b != nil && b.refusing(now, dm.l.cfg.BreakerCooldown)
}
