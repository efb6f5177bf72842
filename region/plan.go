package region

import "fmt"

// Plan is a token bucket: Rate cost units per second refill a bucket holding
// at most Capacity cost units. A plan holds for one key across all processes
// and all regions together.
//
// Rate is at least MinRate (1e-6 per second, about 31 cost units a year):
// a slower plan is not a rate limit, and the store's arithmetic (the
// bucket's expiry, twice its time to fill) must stay finite. A bucket that
// takes longer than MaxBucketTTL/2 to fill (Capacity/Rate above 183 days)
// is forgotten by the store after MaxBucketTTL without a write, and comes
// back full. Rate and Capacity are at most MaxRate and MaxCapacity (1e12):
// one accounting window's usage (rate·60 s + capacity, about 6.1e13) then
// stays below the reconciler's per-report bound (2^53 − 1, exact in JSON),
// and a month of such windows still sums within Postgres' bigint.
type Plan struct {
	// Name names the plan, for the RateLimit-Policy response field; the
	// catalogue fills it in, and the Limiter hands it back with every
	// decision (Decision.Plan).
	// It plays no part in deciding. Default "" (unnamed).
	Name string
	// Rate is the refill rate in cost units per second, in [MinRate,
	// MaxRate].
	Rate float64
	// Capacity is the burst size in cost units, in [1, MaxCapacity].
	Capacity float64
}

// Plan bounds, checked by Plan.Validate.
const (
	// MinRate is the slowest refill a plan may have, in cost units per
	// second: one unit every 11.6 days.
	MinRate = 1e-6
	// MaxRate is the fastest refill a plan may have, in cost units per
	// second.
	MaxRate = 1e12
	// MaxCapacity is the largest burst a plan may have, in cost units, and
	// so the largest cost a decision may ask for.
	MaxCapacity = 1e12
)

// Validate reports whether p is usable, naming the offending field.
func (p Plan) Validate() error {
	switch {
	case !(p.Rate >= MinRate && p.Rate <= MaxRate): // NaN fails both
		return fmt.Errorf("%w: rate must be a number in [%g, %g] cost units per second, got %v", ErrInvalidPlan, float64(MinRate), float64(MaxRate), p.Rate)
	case !(p.Capacity >= 1 && p.Capacity <= MaxCapacity):
		return fmt.Errorf("%w: capacity must be a number in [1, %g] cost units, got %v", ErrInvalidPlan, float64(MaxCapacity), p.Capacity)
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
