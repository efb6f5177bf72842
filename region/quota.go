package region

import (
	"time"

	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/store"
)

// A key whose plan has quotas (docs/design.md [quotas]) holds two leases
// in this process: rate permits from the region's bucket and quota
// permits from the region's quota counters. The entry's permits are what
// both allow, the lesser of the two, so that the fast path spends from
// one number as for any key; quotaState keeps the surplus of the larger
// lease, and the rest of the key's quota state, in its shard's quotas
// map, which only the slow path and keys with quotas touch.
//
// Its fields are read and written only by its own methods
// (TestStatesOwnTheirFields): unfold and split, call and applyReply, the
// base requests', the degraded budget's, release and the returns', each
// beside the step that calls it. The lease engine reaches it at these
// points: a miss attaches the state once (attachQuotaLocked, miss.q); a
// decision asks whether a quota is spent (quotaState.spent) and adds the
// quotas to its answer (quotas.decisionLocked, read-only, beside the
// decision in fast.go); renewing a lease renews the quota lease
// (quotas.leaseLocked, quotalease.go, and the quota call, quotacall.go); a
// degraded verdict spends a degraded budget (quotas.degradedLocked,
// quotalease.go); a check with a request id takes its cost from the quota
// lease (quotas.requestLocked); and eviction, the sweep, refunds and charges
// give quota permits back (quotareturn.go).
type quotaState struct {
	n       int
	periods [store.MaxQuotaPeriods]store.QuotaPeriod // the periods the held quota permits were granted in
	// extraRate and extraQuota are the surplus of the rate lease and of
	// the quota lease over the entry's permits: one of them is zero.
	extraRate, extraQuota int64
	view                  *quotaView // the counters at the last quota call; nil before the first
	// until is the limiter time before which a check is rejected for the
	// key's quotas without a store call (view.exhausted is the quota that
	// refused it); 0: not exhausted.
	until int64
	// charge is cost spent without a quota grant (in degraded mode, or by
	// a check with a request id), added to the counters at the next call.
	charge int64
	// degradedLeft is what degraded decisions may still spend of the
	// quotas while the store is away; set when the key enters degraded
	// mode (degradedSet).
	degradedLeft int64
	degradedSet  bool
	// degradedSpent is what degraded decisions spent since degradedSet;
	// spentAt samples it when base requests start while degraded (the
	// ledger lacks at least what was spent since), and degradedBase is
	// the time of the last base that capped degradedLeft.
	degradedSpent int64
	spentAt       [4]int64
	degradedBase  time.Time
	// bases are fetched ledger bases not yet sent to the counters, by
	// period; fetching is closed when the base request in flight ends.
	bases      [store.MaxQuotaPeriods]*store.QuotaBaseIn
	baseless   bool // the counters held no base at the last call
	fetching   chan struct{}
	lastFetch  int64 // limiter ns the last base request started
	fetchFails int   // base requests failed in a row
	// baseAt and usedAtBase are, per period, the base the counter held at
	// the last call and the counter just after that base reached it: what
	// the region added since is the counter less usedAtBase.
	baseAt     [store.MaxQuotaPeriods]time.Time
	usedAtBase [store.MaxQuotaPeriods]int64
	// syncAt is the limiter time of the last quota call: the quota lease
	// outlives rate leases, and goes back QuotaRebase after it once the
	// key is idle.
	syncAt int64
}

// quotaView is a key's quota counters as its last quota call left them:
// immutable, shared by the decisions taken until the next call.
type quotaView struct {
	n         int
	q         [store.MaxQuotaPeriods]quotaViewPeriod
	exhausted int // the quota with the least room left
}

type quotaViewPeriod struct {
	unit  period.Unit
	limit int64
	start time.Time
	end   time.Time
	// left is what the region could still lease in the period after the
	// call: its allowance less its counter (this process's lease excluded).
	left int64
}

// QuotaStatus is one quota of a decision's plan, as this region sees it.
type QuotaStatus struct {
	Period     period.Unit
	Limit      int64     // the quota, the fleet's, in the period
	Remaining  int64     // what this region may still admit in the period (docs/design.md [quotas])
	Start, End time.Time // the period
}

// Quotas returns the quotas of d's plan as the key's last quota call saw
// them, less what this process spent since, shortest period first; nil
// when the plan has none or its counters were never read.
func (d Decision) Quotas() []QuotaStatus {
	v := d.quota
	if v == nil {
		return nil
	}
	out := make([]QuotaStatus, v.n)
	for i := range v.n {
		p := v.q[i]
		out[i] = QuotaStatus{Period: p.unit, Limit: p.limit, Remaining: max(0, p.left+d.quotaHeld), Start: p.start, End: p.end}
	}
	return out
}

// Tightest names the constraint that gave d's Remaining and Reset: the
// period of one of the plan's quotas, or "" for the token bucket.
func (d Decision) Tightest() period.Unit {
	if d.quotaTight == 0 || d.quota == nil {
		return ""
	}
	return d.quota.q[d.quotaTight-1].unit
}

// QuotaRejected reports that d was rejected (or, for a shadow plan, would
// have been) because a quota of its plan is spent: RetryAfter is then the
// end of that quota's period.
func (d Decision) QuotaRejected() bool { return d.quotaOut }

// quotaLockedState returns the key's quota state, creating it.
func quotaLockedState(sh *shard, key string, e *entry) *quotaState {
	q := sh.quotas[key]
	if q == nil {
		q = &quotaState{}
		if sh.quotas == nil {
			sh.quotas = make(map[string]*quotaState)
		}
		sh.quotas[key] = q
		e.quota = true
	}
	return q
}

// attachQuotaLocked returns the key's quota state when its plan has
// quotas (hasQuotas), creating it, and drops it when its plan lost them.
func attachQuotaLocked(sh *shard, key string, e *entry, hasQuotas bool) *quotaState {
	if hasQuotas {
		return quotaLockedState(sh, key, e)
	}
	if e.quota {
		dropQuotaLocked(sh, key, e)
	}
	return nil
}

// dropQuotaLocked forgets the key's quota state (its plan lost its
// quotas): the entry keeps the whole rate lease, and the quota lease held
// and any pending charge go back to the counters with the next sweep.
func dropQuotaLocked(sh *shard, key string, e *entry) {
	q := sh.quotas[key]
	delete(sh.quotas, key)
	e.quota = false
	if q == nil {
		return
	}
	var back *quotaReturn
	if e.permits, back = q.release(e.permits); back != nil {
		sh.returns = append(sh.returns, pendingReturn{key: key, quota: back})
	}
}

// quotaLease is the whole quota lease this process holds for the key: the
// entry's permits and the quota lease's surplus over them.
func (q *quotaState) quotaLease(e *entry) int64 { return e.permits + q.extraQuota }

// counters returns the key's quota counters as its last quota call saw
// them; nil before the first call, or for a key without quota state.
func (q *quotaState) counters() *quotaView {
	if q == nil {
		return nil
	}
	return q.view
}

// degradedBudget returns what degraded decisions may still spend of the
// key's quotas while the store is away, and whether that budget was set
// since the last quota call.
func (q *quotaState) degradedBudget() (left int64, set bool) {
	return q.degradedLeft, q.degradedSet
}

// owesCounters reports whether a charge or a fetched base waits for the
// key's next quota call.
func (q *quotaState) owesCounters() bool { return q.charge > 0 || q.bases[0] != nil }

// refusalOver reports whether the key was refused for a spent quota and
// that refusal ended by limiter time now: the next check asks again.
func (q *quotaState) refusalOver(now int64) bool { return q.until != 0 && now >= q.until }

// spent reports whether a quota of the key is spent at limiter time now:
// its checks are rejected locally until the next quota call may find room
// (a re-base, a refund). A key without quota state (nil) has none spent.
func (q *quotaState) spent(now int64) bool { return q != nil && q.until != 0 && now < q.until }

// decisionLocked adds the key's quotas to a decision: the tightest
// of the bucket and every quota gives Remaining and Reset, and a check
// refused for a quota waits until that quota's period ends.
func (qs *quotas) decisionLocked(sh *shard, key string, e *entry, now int64, d *Decision) {
	q := sh.quotas[key]
	v := q.counters()
	if v == nil {
		return
	}
	d.quota, d.quotaHeld = v, q.quotaLease(e)
	sn := qs.l.storeNanos(now)
	for i := range v.n {
		rem := max(0, v.q[i].left+d.quotaHeld)
		if rem < d.Remaining {
			d.Remaining = rem
			d.Reset = time.Duration(max(0, v.q[i].end.UnixNano()-sn))
			d.quotaTight = int8(i + 1)
		}
	}
	if q.spent(now) && (!d.Allowed || d.ShadowRejected) {
		d.quotaOut = true
		if d.ShadowRejected {
			return
		}
		d.RetryAfter = max(d.RetryAfter, time.Duration(v.q[v.exhausted].end.UnixNano()-sn), time.Millisecond)
	}
}

// degradedViewLocked adds the key's quotas to a degraded decision:
// the counters as the last quota call saw them, less this process's
// degraded spend since, so that a degraded answer lists its quotas and
// says which one refused it like any other.
func (qs *quotas) degradedViewLocked(m *miss, d *Decision) {
	v := m.q.counters()
	if v == nil {
		return
	}
	d.quota = v
	d.quotaHeld = m.q.quotaLease(m.e)
	if left, set := m.q.degradedBudget(); set {
		// What this process may still spend of the quotas while degraded,
		// as a holding on top of the region's room at the last call:
		// Quotas then shows the tightest room less the degraded spend.
		d.quotaHeld = left - max(v.q[v.exhausted].left, 0)
	}
	sn := qs.l.storeNanos(qs.l.now())
	for i := range v.n {
		if rem := max(0, v.q[i].left+d.quotaHeld); rem < d.Remaining {
			d.Remaining = rem
			d.Reset = time.Duration(max(0, v.q[i].end.UnixNano()-sn))
			d.quotaTight = int8(i + 1)
		}
	}
}
