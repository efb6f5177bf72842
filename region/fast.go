package region

import (
	"math"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// The fast path decides a check from its key's entry under the shard's
// lock, without I/O, and allocates nothing; what only some plans need
// (quotas, shadow) costs one flag test when the plan does not. The slow
// path decides here too, once, after its store work (decideMissLocked),
// and every decision shares the entry arithmetic below it.

// decideLocked decides a check of cost on key's entry e when it can do so
// locally, writing the decision into d (zero), and reports whether it did.
// A cost above the plan's capacity is an error. The decision is written in
// place: copying it up through the calls was a third of the fast path's
// time.
func (l *Limiter) decideLocked(sh *shard, key string, e *entry, now, cost int64, d *Decision) (bool, error) {
	if limit := e.limit(); cost > limit {
		return true, costError(cost, limit)
	}
	if l.storeNanos(now) >= e.windowEnd { // no call until a window ends
		l.rollLocked(sh, key, e, now)
	}
	switch {
	case e.permits >= cost && l.leases.live(e, now):
		l.spendLocked(sh, key, e, now, cost, d)
	case e.syncAt != 0 && !e.inDegraded && e.regionalAt(now) < e.refillTarget(cost):
		// Even with every token refilled since the last sync the region
		// cannot afford a useful lease, so a store call would be wasted.
		l.rejectLocked(sh, key, e, now, cost, d)
	case e.quota && !e.inDegraded && sh.quotas[key].spent(now):
		l.rejectLocked(sh, key, e, now, cost, d)
	default:
		return false, nil
	}
	if e.quota {
		l.quotas.decisionLocked(sh, key, e, now, d)
	}
	return true, nil
}

// decideMissLocked decides a miss from what its store work came to (r),
// applying the degraded verdict v when that was degraded mode: the window
// rolls, a store's grant is applied and a key's two leases are put back
// together (quotaState.split), then the check spends from the entry's
// permits or is rejected. A miss decided without the store (leaseLocal)
// spends from a live lease or meets one of the rejections decidableLocked
// found. When a key's quota call failed after its lease call was granted,
// the verdict was taken before the grant is applied here: its bucket
// starts from the last sync before the call, and the grant settles only
// the debt the call carried, so the verdict's own debt stays.
func (ls *leases) decideMissLocked(m *miss, r renewal, v degradedVerdict) Decision {
	e, sh, now := m.e, m.sh, r.now
	ls.l.rollLocked(sh, m.key, e, now)
	if r.granted {
		ls.grantLocked(m, r.req, r.rep, now)
	}
	if r.split {
		e.permits = r.permits
	}
	switch {
	case r.out == leaseFailClosed:
		// Nothing of an exact plan is allowed without the store, and it
		// keeps no degraded bucket.
		return ls.l.degraded.decisionLocked(m, degradedVerdict{policy: FailClosed}, now)
	case r.degraded():
		return ls.l.degraded.decisionLocked(m, v, now)
	case r.out == leaseAnswered:
		e.leaseLive = false // nothing is leased: every check of an exact plan calls the store
	}
	var d Decision
	if e.permits >= m.cost && (r.out != leaseLocal || ls.live(e, now)) {
		ls.l.spendLocked(sh, m.key, e, now, m.cost, &d)
	} else {
		ls.l.rejectLocked(sh, m.key, e, now, m.cost, &d)
	}
	if e.quota {
		ls.l.quotas.decisionLocked(sh, m.key, e, now, &d)
	}
	return d
}

// The entry arithmetic every path shares.

// spendLocked allows cost from e's lease. The caller adds the key's
// quotas to d (quotas.decisionLocked).
func (l *Limiter) spendLocked(sh *shard, key string, e *entry, now, cost int64, d *Decision) {
	sh.makeRoomLocked(key, e, cost, l.cfg.Window)
	e.permits -= cost
	e.remaining -= cost
	e.spent += cost
	e.addDemand(cost)
	e.referenced = true
	sh.outstanding -= cost
	sh.allowed++
	e.decision(d, true, now, cost)
}

// rejectLocked rejects cost from e's estimate of the region's bucket. The
// caller adds the key's quotas to d (quotas.decisionLocked).
func (l *Limiter) rejectLocked(sh *shard, key string, e *entry, now, cost int64, d *Decision) {
	sh.makeRoomLocked(key, e, cost, l.cfg.Window)
	e.addDemand(cost)
	e.referenced = true
	e.decision(d, false, now, cost)
	refuseLocked(sh, e, cost, d)
}

// refuseLocked counts a rejection of cost that d reports: a rejection,
// or, for a shadow plan, a check allowed without spending that the plan
// would have rejected (entry.rejected then holds would-reject cost: see
// entry.takeUsage).
func refuseLocked(sh *shard, e *entry, cost int64, d *Decision) {
	e.rejected += cost
	e.rejShadow = e.plan.Shadow
	if e.plan.Shadow {
		d.Allowed, d.ShadowRejected, d.RetryAfter = true, true, 0
		sh.shadowRejected++
		e.plan.stats.shadowRejected.Add(1)
		return
	}
	sh.rejected++
}

// grantLocked applies a store call's grant to the entry: the call took
// back the returned permits, charged the key's degraded debt (req.Debt)
// and granted new permits. Exact calls and lease calls share it.
func (ls *leases) grantLocked(m *miss, req store.LeaseRequest, rep store.LeaseReply, now int64) {
	e, sh := m.e, m.sh
	sh.makeRoomLocked(m.key, e, rep.Granted+req.Return, ls.l.cfg.Window)
	if e.inDegraded {
		ls.l.degraded.settleDebtLocked(m, req.Debt)
	}
	e.applyGrant(rep, req.Return, req.Demand, now, ls.l.cfg.LocalShareHalfLife)
	sh.outstanding += rep.Granted - req.Return
}

// makeRoomLocked moves key's usage deltas to pending when adding n to
// them would overflow one (entry.fits), or when their rejected cost was
// counted under a plan of the other kind (shadow or enforcing) than the
// entry's now.
func (s *shard) makeRoomLocked(key string, e *entry, n int64, w time.Duration) {
	if !e.fits(n) || e.rejected != 0 && e.rejShadow != e.plan.Shadow {
		s.pending = append(s.pending, e.takeUsage(key, w))
	}
}

// rollLocked starts a new accounting window when the key's current one
// has ended by limiter time now, moving the old window's deltas to
// pending.
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

// WindowStart returns the start of the accounting window of length w that
// holds instant t for key. The window boundaries of a key are offset by a
// stable hash of the key, so that every process, in every region, computes
// the same windows. It lives beside rollLocked, its caller.
func WindowStart(key string, t time.Time, w time.Duration) time.Time {
	if w <= 0 {
		return t
	}
	off := int64(keyHash(key) % uint64(w))
	n := t.UnixNano() + off
	start := n - mod(n, int64(w)) - off
	return time.Unix(0, start).UTC()
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// keyHash is FNV-1a 64: stable across processes and versions, unlike maphash.
func keyHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return h
}

// takeUsage moves the entry's deltas into a Usage and zeroes them. A shadow
// plan rejects nothing, so the rejected delta it counted is would-reject
// cost (entry.rejShadow).
func (e *entry) takeUsage(key string, w time.Duration) Usage {
	u := Usage{
		Key:         key,
		WindowStart: time.Unix(0, e.windowEnd-int64(w)).UTC(),
		Spent:       e.spent,
		Leased:      e.leased,
		Rejected:    e.rejected,
		Degraded:    e.degraded,
	}
	if e.rejShadow {
		u.Rejected, u.WouldReject = 0, e.rejected
	}
	e.spent, e.leased, e.rejected, e.degraded = 0, 0, 0, 0
	return u
}

// fits reports whether adding n (≥ 0) to every delta, or taking it from
// leased, keeps it in range. With costs bounded by MaxCapacity it only fails
// after about 9,000 flush intervals' worth of a maximal plan in one window;
// a caller whose delta does not fit flushes the entry's usage first.
func (e *entry) fits(n int64) bool {
	room := math.MaxInt64 - n
	return n >= 0 && e.spent <= room && e.rejected <= room && e.degraded <= room &&
		e.leased <= room && e.leased >= math.MinInt64+n
}

// addDemand counts cost asked for, saturating: the count only weighs this
// process against the others.
func (e *entry) addDemand(cost int64) {
	e.demand = uint32(min(int64(e.demand)+cost, math.MaxUint32))
}

// decision writes the decision from e's state into d, which must be zero.
func (e *entry) decision(d *Decision, allowed bool, now, cost int64) {
	rem := e.remaining
	if rem < 0 {
		rem = 0
	}
	d.Allowed = allowed
	d.Remaining = rem
	d.Limit = e.limit()
	d.plan = e.plan
	d.Reset = refillTime(float64(e.capacity)-float64(rem), float64(e.rate))
	if e.syncAt != 0 {
		d.Stale = time.Duration(now - e.syncAt)
	}
	if !allowed {
		d.RetryAfter = retryAfter(e.refillTarget(cost)-e.regionalAt(now), float64(e.rate))
	}
}

// retryAfter is (cost − tokens) / rate, never less than a millisecond: a
// rejection always tells the client to wait.
func retryAfter(missing, rate float64) time.Duration {
	d := refillTime(missing, rate)
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return d
}

func refillTime(missing, rate float64) time.Duration {
	if missing <= 0 || rate <= 0 {
		return 0
	}
	s := missing / rate
	if s > float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Ceil(s * float64(time.Second)))
}
