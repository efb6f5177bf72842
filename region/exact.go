package region

import (
	"context"

	"github.com/quotaplatform/quota/region/store"
)

// exactLocked decides a check of an exact plan (docs/design.md
// [plan-semantics]) with one store call that takes the check's cost from
// the region's bucket or takes nothing: no lease is kept, so nothing
// granted waits in a process where a fault could strand or overspend it.
// When the store cannot be called (breaker open) or the call fails, times
// out or is refused, the check is rejected, flagged Degraded: a call that
// timed out may have taken its cost on the store, which under-admits, and
// nothing admits what the store did not grant. A call that answers slower
// than StoreTimeout counts against the breaker, but its answer stands.
// It returns what the call came to: an answer is a grant for the decision
// to apply. The shard is unlocked for the call.
func (ls *leases) exactLocked(ctx context.Context, m *miss, now int64) renewal {
	now, ok := ls.l.calls.mayCallLocked(ctx, m, now)
	if !ok {
		return renewal{out: leaseFailClosed, now: now}
	}
	e, sh := m.e, m.sh
	req := store.LeaseRequest{
		Key:      m.key,
		Rate:     m.rate(),
		Capacity: m.capacity(),
		Want:     m.cost,
		Min:      m.cost,
		Return:   e.takeLease(), // a lease left from before the plan turned exact
		Spread:   1,
		Demand:   int64(e.demand),
		Grace:    ls.l.cfg.DebtGrace,
	}
	sh.mu.Unlock()
	rep, _, err := ls.l.calls.lease(ctx, req, judgeAnswer)
	sh.mu.Lock()
	e.busy = false
	now = ls.l.now()
	if err != nil {
		sh.outstanding -= req.Return // lost: under-admits
		return renewal{out: leaseFailClosed, now: now}
	}
	// The request carries no debt: a degraded bucket left from leased
	// mode keeps its debt for the sweep.
	return renewal{out: leaseAnswered, now: now, granted: true, req: req, rep: rep}
}
