package region

import (
	"fmt"
	"math"
)

// Plan is a token bucket: Rate cost units per second refill a bucket holding
// at most Capacity cost units. A plan holds for one key across all processes
// and all regions together.
type Plan struct {
	// Name names the plan, for the RateLimit-Policy response field; the
	// catalogue fills it in, and the Limiter hands it back with every
	// decision (Decision.Plan).
	// It plays no part in deciding. Default "" (unnamed).
	Name string
	// Rate is the refill rate in cost units per second. Must be > 0.
	Rate float64
	// Capacity is the burst size in cost units. Must be ≥ 1.
	Capacity float64
}

// Validate reports whether p is usable, naming the offending field.
func (p Plan) Validate() error {
	switch {
	case math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) || p.Rate <= 0:
		return fmt.Errorf("%w: rate must be a positive number, got %v", ErrInvalidPlan, p.Rate)
	case math.IsNaN(p.Capacity) || math.IsInf(p.Capacity, 0) || p.Capacity < 1:
		return fmt.Errorf("%w: capacity must be at least 1, got %v", ErrInvalidPlan, p.Capacity)
	}
	return nil
}

// planRef is a resolved plan as the entries of its keys share it, with its
// capacity as the integer limit the decision path compares costs with.
// Never modified once made.
type planRef struct {
	Plan
	limit int64 // int64(Capacity)
}

// PlanResolver maps a key to its plan. The Limiter calls it on the slow path
// only and caches the answer with the key's lease (it comes back with every
// Decision: Decision.Plan); call Limiter.InvalidateAll after the catalogue
// changes. Implementations must be safe for concurrent use and must not
// block on I/O. An unknown key must yield an error wrapping ErrUnknownPlan.
type PlanResolver interface {
	Plan(key string) (Plan, error)
}

// CostResolver maps an endpoint name to its cost weight. Implementations must
// be safe for concurrent use and must not block on I/O.
type CostResolver interface {
	// Cost returns the endpoint's weight and whether one is configured.
	Cost(endpoint string) (int64, bool)
}

// StaticPlans is a fixed PlanResolver: Keys maps a key to its plan, and every
// other key gets Default. A zero Default means unknown keys have no plan.
type StaticPlans struct {
	Default Plan
	Keys    map[string]Plan
}

// Plan implements PlanResolver.
func (s StaticPlans) Plan(key string) (Plan, error) {
	if p, ok := s.Keys[key]; ok {
		return p, nil
	}
	if s.Default == (Plan{}) {
		return Plan{}, fmt.Errorf("%w: key %q has no plan and there is no default", ErrUnknownPlan, key)
	}
	return s.Default, nil
}

// StaticCosts is a fixed CostResolver from endpoint name to weight.
type StaticCosts map[string]int64

// Cost implements CostResolver.
func (s StaticCosts) Cost(endpoint string) (int64, bool) {
	c, ok := s[endpoint]
	return c, ok
}
