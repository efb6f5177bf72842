package region

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// planCache resolves keys' plans and keeps what their keys share: one
// copy of each plan in use, and each plan's decision counters.
type planCache struct {
	resolver PlanResolver
	// refs holds one copy of each plan in use (Plan → *planRef), which
	// the entries of its keys point to: an entry carries its plan for the
	// Decision without growing by a Plan. Cleared by InvalidateAll.
	refs sync.Map
	// counted holds the decision counters of each plan name and failure
	// policy (planKey → *planCounters), for PlanStats. Never cleared: there
	// are as many as the catalogue has had plans.
	counted sync.Map
}

// resolve returns key's plan, validated.
func (pc *planCache) resolve(key string) (Plan, error) {
	plan, err := pc.resolver.Plan(key)
	if err == nil {
		err = plan.Validate()
	}
	if err != nil {
		return Plan{}, fmt.Errorf("region: plan for key %q: %w", key, err)
	}
	return plan, nil
}

// clear drops the shared copies, for a catalogue change.
func (pc *planCache) clear() { pc.refs.Clear() }

// planKey names one plan's counters: its name and the failure policy that
// applies to it.
type planKey struct {
	name   string
	policy FailurePolicy
}

// planCache.counters counts the decisions of one plan that metrics break out by
// plan. They are touched off the fast path only: on degraded decisions and
// on shadow rejections.
type planCounters struct {
	degradedAllowed  atomic.Int64
	degradedRejected atomic.Int64
	shadowRejected   atomic.Int64
}

// counters returns the counters of p's name and policy.
func (pc *planCache) counters(p Plan) *planCounters {
	k := planKey{p.Name, p.Policy()}
	if c, ok := pc.counted.Load(k); ok {
		return c.(*planCounters)
	}
	c, _ := pc.counted.LoadOrStore(k, new(planCounters))
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
	return l.plans.all()
}

// all implements Limiter.PlanStats.
func (pc *planCache) all() []PlanStats {
	var out []PlanStats
	pc.counted.Range(func(k, v any) bool {
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

// shared returns the shared copy of p.
func (pc *planCache) shared(p Plan) *planRef {
	if r, ok := pc.refs.Load(p); ok {
		return r.(*planRef)
	}
	cal, _ := p.Calendar() // the plan was validated: the zone loads
	r, _ := pc.refs.LoadOrStore(p, &planRef{Plan: p, limit: int64(p.Capacity), stats: pc.counters(p), cal: cal})
	return r.(*planRef)
}
