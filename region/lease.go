package region

import (
	"context"
	"math"

	"github.com/quotaplatform/quota/region/store"
)

// leases is the lease engine's slow path (docs/design.md [leasing]): a
// miss resolves the key's plan and share, attaches the key's entry, and
// renews its lease (or makes an exact plan's call) through the store
// client, and its decision applies what that came to. Its state is the
// entries in the shards; the fast path (Limiter.decideLocked) spends from
// them without it.
type leases struct{ l *Limiter }

// The rate lease of a miss: the request that returns the unspent permits
// and sizes the next lease, the store call, and the reply applied to the
// entry (docs/design.md [leasing]).

// leaseLocked makes the store call that returns the key's unspent permits,
// charges its degraded debt and leases anew, and returns what it came to.
// The shard is unlocked for the call.
func (ls *leases) leaseLocked(ctx context.Context, m *miss, now int64, invalidated bool) renewal {
	req := ls.requestLocked(m, now, invalidated)
	m.sh.mu.Unlock()
	rep, _, err := ls.l.calls.lease(ctx, req, judgeAnswer)
	m.sh.mu.Lock()
	m.e.busy = false
	return ls.replyLocked(m, req, rep, err, ls.l.now())
}

// live reports whether e's lease may still be spent at now: it was not
// ended early and LeaseTTL has not passed since it was granted.
func (ls *leases) live(e *entry, now int64) bool {
	return e.leaseLive && now < e.syncAt+int64(ls.l.cfg.LeaseTTL)
}

// requestLocked sizes the next lease and takes the current one back
// for the call (the entry is busy until the call returns). The call carries
// the key's degraded debt only when the last store call succeeded
// (docs/design.md [degraded-debt]), and the demand counted since the last
// call.
func (ls *leases) requestLocked(m *miss, now int64, invalidated bool) store.LeaseRequest {
	debt := ls.l.degraded.debtLocked(m)
	capCost := ls.maxLease(m.rate(), m.procs)
	e := m.e
	live := ls.live(e, now)
	want := e.sizeLease(m.cost, capCost, live, invalidated)
	return store.LeaseRequest{
		Key:      m.key,
		Rate:     m.rate(),
		Capacity: m.capacity(),
		Want:     want,
		Min:      m.cost,
		Return:   e.takeLease(),
		Spread:   int64(m.procs),
		Debt:     debt,
		Demand:   int64(e.demand),
		Grace:    ls.l.cfg.DebtGrace,
	}
}

// maxLease is the largest lease one process may hold for a key: all the
// region's processes together hold at most AccuracyBudget of a horizon's
// worth of the region's rate.
func (ls *leases) maxLease(regionalRate float64, processes int) int64 {
	c := ls.l.cfg.AccuracyBudget * regionalRate * ls.l.cfg.AccuracyHorizon.Seconds() / float64(processes)
	if c < 1 {
		return 1
	}
	if c > math.MaxUint32 {
		return math.MaxUint32
	}
	return int64(c)
}

// replyLocked returns what a lease call came to at limiter time now: on
// a reply, the grant for the decision to apply (grantLocked). storeCall
// told the breaker (judgeAnswer): an answer slower than StoreTimeout is
// used, though it counted against the store's health.
func (ls *leases) replyLocked(m *miss, req store.LeaseRequest, rep store.LeaseReply, err error, now int64) renewal {
	sh := m.sh
	if err != nil && store.IsTransient(err) {
		// The returned permits may or may not have reached the store; they
		// count as lost, which under-admits and is safe.
		sh.outstanding -= req.Return
		return renewal{out: leaseUnavailable, now: now}
	}
	if err != nil {
		// Refused: the call wrote nothing, so the permits it returned are
		// lost (under-admission).
		sh.outstanding -= req.Return
		return renewal{out: leaseRefused, now: now}
	}
	return renewal{out: leaseGranted, now: now, granted: true, req: req, rep: rep}
}

// sizeLease sets the size of the next lease and returns how many permits
// to ask for: at least cost, at most capCost (Limiter.leaseCap) unless cost
// is more (docs/design.md [leasing]). The size doubles when the last lease
// ran out while still live, is halved when one expired mostly unspent, and
// is kept when one expired mostly spent (the key's rate fits the lease) or
// the lease was invalidated.
func (e *entry) sizeLease(cost, capCost int64, live, invalidated bool) (want int64) {
	switch {
	case invalidated:
	case e.syncAt != 0 && live:
		e.nextLease = uint32(min(int64(e.nextLease)*2, math.MaxUint32))
	default:
		e.shrinkIdleLease()
	}
	want = max(cost, min(int64(e.nextLease), capCost))
	e.nextLease = uint32(min(int64(e.nextLease), capCost))
	return want
}

// shrinkIdleLease halves the next lease when the current one is more than
// half unspent.
func (e *entry) shrinkIdleLease() {
	if e.permits > int64(e.nextLease)/2 {
		e.nextLease = max(e.nextLease/2, 1)
	}
}

// takeLease empties the lease for a store call, which returns the permits
// it held; the entry is busy (not evicted) until the call returns.
func (e *entry) takeLease() (permits int64) {
	permits, e.permits = e.permits, 0
	e.busy = true
	return permits
}
