package region

import (
	"context"

	"github.com/quotaplatform/quota/region/store"
)

// A key with quotas holds a quota lease beside its rate lease: both are
// taken apart for its store calls and put back together after them
// (quotaState.split, quotacall.go).

// leaseQuotaLocked is leaseLocked for a key whose plan has quotas (its
// quota state is q): it renews the rate lease when it is spent, expired
// or ended, and the quota lease when it is spent, its periods ended, or a
// base or a charge waits for the counters; then the entry's permits are
// the lesser of the two leases. It returns what the calls came to and the limiter time after
// them. The shard is unlocked for the calls.
func (l *Limiter) leaseQuotaLocked(ctx context.Context, m *miss, q *quotaState, now int64, invalidated bool) (leaseOutcome, int64) {
	e := m.e
	var ps [store.MaxQuotaPeriods]store.QuotaPeriod
	n, held, rolled := l.quotaUnfoldLocked(m, q, now, &ps)
	rateLive := l.leaseLive(e, now)
	needRate := invalidated || !rateLive || e.permits < m.cost
	needQuota := rolled || held < m.cost || q.charge > 0 || q.bases[0] != nil || (q.until != 0 && now >= q.until)

	rateWant := m.cost
	if needRate {
		req := l.leaseRequestLocked(m, now, invalidated)
		rateWant = req.Want
		m.sh.mu.Unlock()
		rep, lat, err := l.callStore(ctx, req)
		m.sh.mu.Lock()
		e.busy = false
		now = l.now()
		if out := l.applyLeaseReplyLocked(m, req, rep, lat, err, now); out != leaseGranted {
			q.split(e, held)
			return out, now
		}
	}
	if needQuota {
		var ok bool
		held, ok = l.quotaCallLocked(ctx, m, q, &ps, n, held, rateWant)
		now = l.now()
		if !ok {
			q.split(e, held)
			return leaseUnavailable, now
		}
	}
	q.split(e, held)
	return leaseGranted, now
}

// quotaUnfoldLocked takes the key's two leases apart for a store call:
// the entry's permits become the whole rate lease, and it returns the
// periods of the plan's quotas now, the quota lease held (none when the
// periods rolled since it was granted), and whether they rolled.
func (l *Limiter) quotaUnfoldLocked(m *miss, q *quotaState, now int64, ps *[store.MaxQuotaPeriods]store.QuotaPeriod) (n int, held int64, rolled bool) {
	n = l.currentPeriods(m, l.storeNanos(now), ps)
	held, rolled = q.unfold(m.e, ps, n)
	return n, held, rolled
}
