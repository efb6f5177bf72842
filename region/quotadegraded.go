package region

import (
	"math"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// What a degraded key may spend of its quotas while the store is away,
// kept on the ledger's bases, and what its decisions say of them.

// degradedQuotaLocked decides a degraded check's quotas: what a degraded
// decision may spend of them is the quota lease this process held, plus
// its local share of what the region could still lease at the last call
// (its whole quota lease's worth when it never made one), so that the
// region's processes together stay within the region's allowance. It
// reports whether cost fits, and counts it as spent without a grant, to
// be charged to the counters after recovery.
func (l *Limiter) degradedQuotaLocked(m *miss, local float64, open bool) bool {
	q := m.sh.quotas[m.key]
	if q == nil {
		return true
	}
	if !q.degradedSet {
		left := int64(math.MaxInt64)
		if q.view != nil {
			for i := range q.view.n {
				left = min(left, q.view.q[i].left)
			}
			left = int64(float64(max(left, 0)) * local)
		} else {
			var ps [store.MaxQuotaPeriods]store.QuotaPeriod
			n := l.currentPeriods(m, l.storeNanos(l.now()), &ps)
			left = l.quotaWant(m, &ps, n, m.cost)
		}
		q.degradedLeft = q.quotaLease(m.e) + left
		q.degradedSet, q.degradedSpent, q.spentAt = true, 0, [4]int64{}
	}
	l.degradedRebaseLocked(m, q, local)
	if !open && q.degradedLeft < m.cost {
		return false
	}
	q.degradedLeft -= m.cost
	q.degradedSpent += m.cost
	q.charge += m.cost
	return true
}

// degradedRebaseLocked keeps a degraded key's quota budget on the ledger
// while its store is away (the ledger is not: its bases come over NATS):
// at most once a second it asks for the key's bases, and each new base
// caps what this process may still spend at its local share of the
// region's room by that base, share × (limit − base total), less what it
// spent that the base may not hold yet (its degraded spend since the
// request three before this one, about three seconds: a report's way to
// the ledger). Without it a long outage spends on the room and the share
// of the last call before it, while the other regions spend the same
// room.
func (l *Limiter) degradedRebaseLocked(m *miss, q *quotaState, local float64) {
	if l.cfg.QuotaBases == nil || q.n == 0 {
		return
	}
	now := l.now()
	if b := q.bases[0]; b != nil && !b.AsOf.Equal(q.degradedBase) {
		q.degradedBase = b.AsOf
		unreported := q.degradedSpent - q.spentAt[len(q.spentAt)-1]
		room := int64(math.MaxInt64)
		for i := range q.n {
			if b := q.bases[i]; b != nil {
				room = min(room, int64(math.Floor(m.share*float64(q.periods[i].Limit-b.Total))))
			}
		}
		q.degradedLeft = min(q.degradedLeft, max(0, int64(local*float64(max(room, 0)))-unreported))
	}
	if q.fetching != nil || (q.lastFetch != 0 && now-q.lastFetch < int64(time.Second)) {
		return
	}
	copy(q.spentAt[1:], q.spentAt[:len(q.spentAt)-1])
	q.spentAt[0] = q.degradedSpent
	done := make(chan struct{})
	q.fetching, q.lastFetch = done, now
	l.fetches.Add(1)
	go l.fetchBases(m.key, m.sh, q, q.n, q.periods, done)
}

// degradedQuotaViewLocked adds the key's quotas to a degraded decision:
// the counters as the last quota call saw them, less this process's
// degraded spend since, so that a degraded answer lists its quotas and
// says which one refused it like any other.
func (l *Limiter) degradedQuotaViewLocked(m *miss, d *Decision) {
	q := m.sh.quotas[m.key]
	if q == nil || q.view == nil {
		return
	}
	d.quota = q.view
	d.quotaHeld = q.quotaLease(m.e)
	if q.degradedSet {
		// What this process may still spend of the quotas while degraded,
		// as a holding on top of the region's room at the last call:
		// Quotas then shows the tightest room less the degraded spend.
		tight := q.view.q[0].left
		for i := 1; i < q.view.n; i++ {
			tight = min(tight, q.view.q[i].left)
		}
		d.quotaHeld = q.degradedLeft - max(tight, 0)
	}
	sn := l.storeNanos(l.now())
	for i := range q.view.n {
		if rem := max(0, q.view.q[i].left+d.quotaHeld); rem < d.Remaining {
			d.Remaining = rem
			d.Reset = time.Duration(max(0, q.view.q[i].end.UnixNano()-sn))
			d.quotaTight = int8(i + 1)
		}
	}
}
