package region

import (
	"context"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// A key with quotas holds a quota lease beside its rate lease: both are
// taken apart for its store calls and put back together after them
// (quotaState.split, quotacall.go). While the store is away, a degraded
// check spends a budget that starts from the quota lease held
// (quotas.degradedLocked).

// leaseLocked is Limiter.leaseLocked for a key whose plan has quotas (its
// quota state is m.q): it renews the rate lease when it is spent, expired
// or ended, and the quota lease when it is spent, its periods ended, or a
// base or a charge waits for the counters; the entry's permits are then
// the lesser of the two leases. The rate lease stays off the entry until
// the decision puts the two back together (quotaState.unfold).
func (qs *quotas) leaseLocked(ctx context.Context, m *miss, now int64, invalidated bool) renewal {
	e, q := m.e, m.q
	var ps [store.MaxQuotaPeriods]store.QuotaPeriod
	n, rate, held, rolled := qs.unfoldLocked(m, q, now, &ps)
	needRate := invalidated || !qs.l.leases.live(e, now) || rate < m.cost
	needQuota := rolled || held < m.cost || q.owesCounters() || q.refusalOver(now)

	r := renewal{out: leaseGranted, now: now, split: true}
	rateWant := m.cost
	if needRate {
		e.permits = rate // the call sizes the next lease on it and returns it (takeLease)
		req := qs.l.leases.requestLocked(m, now, invalidated)
		rateWant = req.Want
		m.sh.mu.Unlock()
		rep, _, err := qs.l.calls.lease(ctx, req, judgeAnswer)
		m.sh.mu.Lock()
		e.busy = false
		r = qs.l.leases.replyLocked(m, req, rep, err, qs.l.now())
		r.split, rate = true, r.rep.Granted
		if !r.granted {
			r.permits = q.split(0, held)
			return r
		}
	}
	if needQuota {
		var ok bool
		held, ok = qs.callLocked(ctx, m, q, &ps, n, held, rateWant)
		r.now = qs.l.now()
		if !ok {
			r.out = leaseUnavailable
		}
	}
	r.permits = q.split(rate, held)
	return r
}

// unfoldLocked takes the key's two leases apart and off the entry
// for a store call (quotaState.unfold): it returns the periods of the
// plan's quotas now, the whole rate lease, the quota lease held (none when
// the periods rolled since it was granted), and whether they rolled.
func (qs *quotas) unfoldLocked(m *miss, q *quotaState, now int64, ps *[store.MaxQuotaPeriods]store.QuotaPeriod) (n int, rate, held int64, rolled bool) {
	n = qs.currentPeriods(m, qs.l.storeNanos(now), ps)
	rate, held, rolled = q.unfold(m.e, ps, n)
	return n, rate, held, rolled
}

// currentPeriods fills ps with the periods of m's quotas at store time sn
// and returns how many there are.
func (qs *quotas) currentPeriods(m *miss, sn int64, ps *[store.MaxQuotaPeriods]store.QuotaPeriod) int {
	ref := m.e.plan
	at := time.Unix(0, sn)
	n := 0
	for _, q := range ref.QuotaList() {
		start, end := ref.cal.Bounds(q.Period, at)
		ps[n] = store.QuotaPeriod{Unit: q.Period, Start: start, End: end, Limit: q.Limit, Share: m.share}
		n++
	}
	return n
}

// unfold takes the key's two leases apart and off the entry, the quota
// periods being ps[:n] now: it returns the whole rate lease, the quota
// lease held, and whether the periods rolled. The entry holds no permit
// until split puts the two back together, so that a check on the fast
// path while the shard is unlocked for a call finds no rate permit that
// no quota permit covers.
func (q *quotaState) unfold(e *entry, ps *[store.MaxQuotaPeriods]store.QuotaPeriod, n int) (rate, held int64, rolled bool) {
	// A counter is a (unit, period start): a new limit on the same
	// periods keeps the counters and the lease held.
	rolled = n != q.n
	for i := 0; i < n && !rolled; i++ {
		rolled = ps[i].Unit != q.periods[i].Unit || !ps[i].Start.Equal(q.periods[i].Start)
	}
	held = q.quotaLease(e)
	rate, e.permits = e.permits+q.extraRate, 0
	q.extraRate, q.extraQuota = 0, 0
	if rolled {
		// The permits held were granted in periods that ended (or by other
		// quotas): their counters keep them, which charges an ended period
		// (or a replaced quota) for permits nobody spent. That is harmless:
		// such a counter grants nothing more.
		held = 0
		q.until = 0
		q.baseless = false
	}
	return rate, held, rolled
}

// degradedMode.decideLocked decides a degraded check's quotas: what a degraded
// decision may spend of them is the quota lease this process held, plus
// its local share of what the region could still lease at the last call
// (its whole quota lease's worth when it never made one), so that the
// region's processes together stay within the region's allowance. It
// reports whether cost fits, and counts it as spent without a grant, to
// be charged to the counters after recovery.
func (qs *quotas) degradedLocked(m *miss, local float64, open bool) bool {
	q := m.q
	if _, set := q.degradedBudget(); !set {
		var left int64
		if v := q.counters(); v != nil {
			left = int64(float64(max(v.q[v.exhausted].left, 0)) * local)
		} else {
			var ps [store.MaxQuotaPeriods]store.QuotaPeriod
			n := qs.currentPeriods(m, qs.l.storeNanos(qs.l.now()), &ps)
			left = qs.want(m, &ps, n, m.cost)
		}
		q.startDegraded(q.quotaLease(m.e) + left)
	}
	qs.degradedRebaseLocked(m, q, local)
	return q.spendDegraded(m.cost, open)
}

// requestQuota is what became of a check's cost taken from a key's quota
// lease (quotas.requestLocked).
type requestQuota uint8

const (
	quotaTaken       requestQuota = iota // taken from the quota lease
	quotaSpent                           // a quota cannot afford it
	quotaUnavailable                     // the store did not answer
)

// requestLocked takes a check's cost from the key's quota lease for
// a check with a request id (which is decided by its own store call, not
// from the rate lease), leasing quota first when the lease held cannot
// cover it. The caller gives the cost back (returnOf) when the check is
// then not charged. The shard is unlocked for a call.
func (qs *quotas) requestLocked(ctx context.Context, m *miss, now int64) (requestQuota, *quotaReturn) {
	e, q := m.e, m.q
	var ps [store.MaxQuotaPeriods]store.QuotaPeriod
	n, rate, held, rolled := qs.unfoldLocked(m, q, now, &ps)
	if rolled || held < m.cost || q.owesCounters() {
		var ok bool
		held, ok = qs.callLocked(ctx, m, q, &ps, n, held, m.cost)
		if !ok {
			e.permits = q.split(rate, held)
			return quotaUnavailable, nil
		}
	}
	if held < m.cost {
		e.permits = q.split(rate, held)
		return quotaSpent, nil
	}
	e.permits = q.split(rate, held-m.cost)
	return quotaTaken, q.returnOf(m.cost)
}
