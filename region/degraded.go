package region

import "math"

// degradedVerdict is what a check decided without the store comes to, for
// decideMissLocked to apply to the entry (degradedDecisionLocked).
type degradedVerdict struct {
	policy   FailurePolicy
	allowed  bool
	quotaOut bool    // refused because the quotas' degraded budget cannot afford it
	tokens   float64 // the key's degraded bucket after the check
	// rate and capacity are the degraded bucket's: its refill and size.
	rate, capacity float64
}

// degradedVerdictLocked decides a miss while the store is unavailable or
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
func (l *Limiter) degradedVerdictLocked(m *miss, r renewal) degradedVerdict {
	e, cost, now := m.e, m.cost, r.now
	floor := math.Max(l.cfg.MinLocalShare, l.cfg.FloorFraction/float64(m.procs))
	local := math.Min(1, math.Max(e.localShare(m.procs, l.cfg.LocalSharePrior), floor))
	v := degradedVerdict{policy: e.plan.Policy(), rate: m.rate() * local, capacity: m.capacity()}
	// Every policy keeps the bucket: it marks the key as deciding without
	// the store, and holds a refused key's time.
	b := l.degradedBucketLocked(m, now, local, v.rate, v.capacity)
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
		quotaOK = l.quotas.degradedLocked(m, local, open)
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

// degradedLocked decides a check with a request id while the store is
// unavailable (AllowRequest), as allowSlow does any check.
func (l *Limiter) degradedLocked(m *miss, now int64) Decision {
	r := renewal{out: leaseUnavailable, now: now}
	return l.decideMissLocked(m, r, l.degradedVerdictLocked(m, r))
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
