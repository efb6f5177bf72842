package region

import (
	"context"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// Quota permits and charges on their way back to the counters: from an
// evicted or idle key, a degraded key's spend, a refund or a charge.

// returnOf is a return of held quota permits to the counters they came
// from.
func (q *quotaState) returnOf(held int64) *quotaReturn {
	r := &quotaReturn{n: q.n, periods: q.periods}
	for i := range r.n {
		r.periods[i].Return = held
		r.periods[i].Base = nil
	}
	return r
}

// quotaReturn is quota permits on their way back to the counters of the
// periods they were granted in, with any cost to charge them.
type quotaReturn struct {
	n       int
	periods [store.MaxQuotaPeriods]store.QuotaPeriod // Return set
	charge  int64
}

// release empties the key's leases for a return: the rate permits (the
// entry's permits, already taken as permits, and the rate surplus) and a
// return of the quota lease and any pending charge to the counters.
func (q *quotaState) release(permits int64) (rate int64, qr *quotaReturn) {
	rate = permits + q.extraRate
	held := permits + q.extraQuota
	q.extraRate, q.extraQuota = 0, 0
	if q.n == 0 || (held <= 0 && q.charge <= 0) {
		return rate, nil
	}
	qr = q.returnOf(held)
	qr.charge, q.charge = q.charge, 0
	return rate, qr
}

// sweeper.send gives r's quota permits back to the counters they came
// from and charges its cost, in one quota call that leases nothing. Once
// sent, r carries no quota part: a retry of r (the rate part failed
// after) does not send it twice.
func (qs *quotas) sendReturn(ctx context.Context, r pendingReturn) returnOutcome {
	if r.quota == nil {
		return returnSent
	}
	if qs.store == nil {
		return returnRefused
	}
	call := store.QuotaCall{Key: r.key, Periods: r.quota.periods[:r.quota.n], Charge: r.quota.charge}
	_, _, err := qs.call(ctx, call, judgeReach)
	if store.IsTransient(err) {
		return returnFailed
	}
	if err != nil {
		return returnRefused
	}
	return returnSent
}

// adjustment is a refund's or a post-hoc charge's change to the
// key's quota counters of the current periods, for the next sweep to
// send: a refund returns cost, a charge adds it.
func (qs *quotas) adjustment(key string, plan Plan, share float64, op store.RequestOp, cost, now int64) pendingReturn {
	cal, _ := plan.Calendar() // validated by the caller
	at := time.Unix(0, qs.l.storeNanos(now))
	qr := &quotaReturn{}
	for _, q := range plan.QuotaList() {
		start, end := cal.Bounds(q.Period, at)
		p := store.QuotaPeriod{Unit: q.Period, Start: start, End: end, Limit: q.Limit, Share: share}
		if op == store.RequestRefund {
			p.Return = cost
		}
		qr.periods[qr.n] = p
		qr.n++
	}
	if op != store.RequestRefund {
		qr.charge = cost
	}
	return pendingReturn{key: key, quota: qr}
}

// collectLocked is sweeper.collect for a key with quotas: an expired
// rate lease goes back as any other, but the quota lease stays for
// QuotaRebase after its call (renewing it with every rate lease would
// double the key's store calls), then goes back once the key is idle,
// or at once on Drain (all). A charge goes whenever the store is back.
// It reports whether there is anything to send.
func (qs *quotas) collectLocked(key string, e *entry, q *quotaState, debt, now int64, all, live, chargeDebts bool) (pendingReturn, bool) {
	r := pendingReturn{key: key, debt: debt, rate: float64(e.rate), capacity: float64(e.capacity)}
	expired := all || !live
	if expired {
		r.permits = q.releaseRate(e)
	}
	r.quota = q.collect(expired, all || q.idleFor(now, qs.l.cfg.QuotaRebase), chargeDebts)
	return r, r.permits > 0 || r.debt > 0 || r.quota != nil
}

// releaseRate takes back the key's expired rate lease for a sweep to give
// back: the entry's permits and the rate surplus; the quota permits among
// them stay in the quota lease (keepReleased).
func (q *quotaState) releaseRate(e *entry) (rate int64) {
	if e.permits <= 0 && q.extraRate <= 0 {
		return 0
	}
	return q.keepReleased(e.releaseLease())
}

// idleFor reports whether the key made no quota call for rebase
// (QuotaRebase) up to limiter time now.
func (q *quotaState) idleFor(now int64, rebase time.Duration) bool {
	return now-q.syncAt >= int64(rebase)
}

// collect returns what a sweep gives back to the key's counters: the
// quota lease and the charge once its rate lease expired and the key is
// idle, or the charge alone once the store is back (chargeDebts); nil
// when nothing goes.
func (q *quotaState) collect(expired, idle, chargeDebts bool) *quotaReturn {
	switch {
	case q.n == 0:
	case expired && idle && (q.extraQuota > 0 || q.charge > 0):
		r := q.returnOf(q.extraQuota)
		r.charge = q.charge
		q.handedBack(true)
		return r
	case q.charge > 0 && chargeDebts:
		// The store is back: what degraded decisions spent goes to the
		// counters, and the next outage starts a new degraded budget.
		r := &quotaReturn{n: q.n, periods: q.periods, charge: q.charge}
		q.handedBack(false)
		return r
	}
	return nil
}

// keepReleased keeps the quota permits of a released rate lease in the
// quota lease, and returns the rate permits to give back: the released
// lease and the rate lease's surplus.
func (q *quotaState) keepReleased(released int64) (rate int64) {
	rate = released + q.extraRate
	q.extraRate = 0
	q.extraQuota += released
	return rate
}

// handedBack records that the charge, and the quota lease too when
// lease, went back to the counters; the next outage starts a new
// degraded budget.
func (q *quotaState) handedBack(lease bool) {
	if lease {
		q.extraQuota = 0
	}
	q.charge = 0
	q.degradedSet = false
}
