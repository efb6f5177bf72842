package region

import (
	"slices"
	"strings"
	"sync/atomic"
)

// planKey names one plan's counters: its name and the failure policy that
// applies to it.
type planKey struct {
	name   string
	policy FailurePolicy
}

// planCounters counts the decisions of one plan that metrics break out by
// plan. They are touched off the fast path only: on degraded decisions and
// on shadow rejections.
type planCounters struct {
	degradedAllowed  atomic.Int64
	degradedRejected atomic.Int64
	shadowRejected   atomic.Int64
}

// planCounters returns the counters of p's name and policy.
func (l *Limiter) planCounters(p Plan) *planCounters {
	k := planKey{p.Name, p.Policy()}
	if c, ok := l.planStats.Load(k); ok {
		return c.(*planCounters)
	}
	c, _ := l.planStats.LoadOrStore(k, new(planCounters))
	return c.(*planCounters)
}

// PlanStats counts one plan's decisions that depend on its semantics
// (docs/design.md [plan-semantics]), since New.
type PlanStats struct {
	Plan   string        // Plan.Name ("" for an unnamed plan)
	Policy FailurePolicy // the failure policy that applied (Plan.Policy)
	// DegradedAllowed and DegradedRejected count decisions taken while
	// the store was unavailable, by the result the policy gave (a shadow
	// plan's would-be rejections included in DegradedRejected).
	DegradedAllowed, DegradedRejected int64
	// ShadowRejected counts checks a shadow plan allowed and would have
	// rejected.
	ShadowRejected int64
}

// PlanStats returns the counters of every plan name and failure policy
// the Limiter has decided for, sorted by plan and policy. Call it at
// metric-scrape rates.
func (l *Limiter) PlanStats() []PlanStats {
	var out []PlanStats
	l.planStats.Range(func(k, v any) bool {
		pk, c := k.(planKey), v.(*planCounters)
		out = append(out, PlanStats{
			Plan:             pk.name,
			Policy:           pk.policy,
			DegradedAllowed:  c.degradedAllowed.Load(),
			DegradedRejected: c.degradedRejected.Load(),
			ShadowRejected:   c.shadowRejected.Load(),
		})
		return true
	})
	slices.SortFunc(out, func(a, b PlanStats) int {
		if c := strings.Compare(a.Plan, b.Plan); c != 0 {
			return c
		}
		return strings.Compare(string(a.Policy), string(b.Policy))
	})
	return out
}
