package region

import (
	"math"
	"time"
)

// degradeLocked decides a miss that its store work did not decide (out)
// in degraded mode (degradedLocked), where an exact plan's check is
// rejected (failClosedLocked). After the store refused
// the key's call for a reason of the key's own (store.ErrStoreRejected: a
// bucket key of the wrong type, arguments the script refused), only this
// key is: the store answered, and the breaker counted it as any answer (a
// success unless it came too slowly). Such a key tries the store again
// after BreakerCooldown (refusedLocked), and the debt its call carried
// stays with its degraded bucket.
func (l *Limiter) degradeLocked(m *miss, now int64, out leaseOutcome) Decision {
	if out == leaseFailClosed {
		// Nothing of an exact plan is allowed without the store, and it
		// keeps no degraded bucket.
		return l.failClosedLocked(m, now)
	}
	d := l.degradedLocked(m, now)
	if out == leaseRefused {
		m.sh.buckets[m.key].refusedAt = now
	}
	return d
}

// degradedLocked decides while the store is unavailable, flagged, by the
// plan's failure policy (docs/design.md [plan-semantics]): FailOpen allows,
// FailClosed rejects until the breaker's next probe, and FailDegraded
// decides from the key's local degraded bucket (docs/design.md
// [degraded-share]). It starts from this process's
// local share of what the region had left, refills at rate × region share ×
// max(local share, floor), and may hold up to the region's capacity
// (capacity × region share): over an outage of T a process admits at most
// max(local share, floor) × region share × (capacity + rate·T), as if the
// capacity were split too, but a key whose region part of the capacity is
// smaller than one request (a low share split over several processes) is
// not rejected for the whole outage because its bucket cannot hold one
// request. A key the process never synced starts from the region's
// capacity.
func (l *Limiter) degradedLocked(m *miss, now int64) Decision {
	e, sh, cost := m.e, m.sh, m.cost
	floor := math.Max(l.cfg.MinLocalShare, l.cfg.FloorFraction/float64(m.procs))
	local := math.Min(1, math.Max(e.localShare(m.procs, l.cfg.LocalSharePrior), floor))
	rate, capacity := m.rate()*local, m.capacity()
	// Every policy keeps the bucket: it marks the key as deciding without
	// the store, and holds a refused key's time (degradeLocked).
	b := l.degradedBucketLocked(m, now, local, rate, capacity)
	policy := e.plan.Policy()
	if policy == FailClosed {
		return l.failClosedLocked(m, now)
	}
	// The quotas' degraded budget: FailOpen counts the check against it
	// whatever it holds, FailDegraded spends it only when the bucket holds
	// the cost.
	if e.plan.HasQuotas() {
		quotaLockedState(sh, m.key, e)
	}
	quotaOK := true
	if e.quota && (policy == FailOpen || b.tokens >= float64(cost)) {
		quotaOK = l.degradedQuotaLocked(m, local, policy == FailOpen)
	}
	sh.makeRoomLocked(m.key, e, cost, l.cfg.Window)
	e.referenced = true
	d := Decision{Limit: e.limit(), plan: e.plan, Degraded: true, Path: PathDegraded}
	if e.syncAt != 0 {
		d.Stale = time.Duration(now - e.syncAt)
	}
	e.addDemand(cost)
	sh.degraded++
	if policy == FailOpen {
		// Allowed and flagged; nothing is charged back to the bucket
		// (docs/design.md [plan-semantics]), but the quotas count it.
		e.spent += cost
		e.degraded += cost
		sh.allowed++
		e.plan.stats.degradedAllowed.Add(1)
		d.Allowed = true
		d.Remaining = int64(b.tokens)
		return d
	}
	if !quotaOK {
		d.quotaOut = true
	}
	if b.tokens >= float64(cost) && quotaOK {
		b.tokens -= float64(cost)
		b.debt += cost
		e.spent += cost
		e.degraded += cost
		sh.allowed++
		e.plan.stats.degradedAllowed.Add(1)
		d.Allowed = true
	} else {
		d.RetryAfter = retryAfter(float64(cost)-b.tokens, rate)
		if d.quotaOut {
			d.RetryAfter = max(l.breaker.untilProbe(now), time.Millisecond)
		}
		e.plan.stats.degradedRejected.Add(1)
		refuseLocked(sh, e, cost, &d)
	}
	d.Remaining = int64(b.tokens)
	d.Reset = refillTime(capacity-b.tokens, rate)
	if e.quota {
		l.degradedQuotaViewLocked(m, &d)
	}
	return d
}

// degradedBucketLocked returns the key's degraded bucket refilled to now,
// creating it when the key enters degraded mode. local is this process's
// share of the region's traffic, floor applied, at most 1.
func (l *Limiter) degradedBucketLocked(m *miss, now int64, local, rate, capacity float64) *degradedBucket {
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

// failClosedLocked rejects a check because the store could not decide it,
// flagged Degraded, with RetryAfter until the breaker's next probe: the
// FailClosed policy, and every failure of an exact plan.
func (l *Limiter) failClosedLocked(m *miss, now int64) Decision {
	e, sh, cost := m.e, m.sh, m.cost
	sh.makeRoomLocked(m.key, e, cost, l.cfg.Window)
	e.referenced = true
	e.addDemand(cost)
	d := Decision{Limit: e.limit(), plan: e.plan, Degraded: true, Path: PathDegraded,
		RetryAfter: max(l.breaker.untilProbe(now), time.Millisecond)}
	if e.syncAt != 0 {
		d.Stale = time.Duration(now - e.syncAt)
	}
	sh.degraded++
	e.plan.stats.degradedRejected.Add(1)
	refuseLocked(sh, e, cost, &d)
	return d
}
