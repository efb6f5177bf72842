package region

import (
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/store"
)

// The plan vocabulary is package limit's, so that the catalogue, the
// ledger and the reconciler speak of plans without linking the engine;
// region re-exports it under the names its callers have always used.

// Plan is a key's token bucket and its semantics: see limit.Plan.
type Plan = limit.Plan

// Quota is one calendar quota of a plan: see limit.Quota.
type Quota = limit.Quota

// FailurePolicy is a plan's behaviour while the regional store is
// unavailable: see limit.FailurePolicy.
type FailurePolicy = limit.FailurePolicy

// Mode is how a plan's decisions reach the store: see limit.Mode.
type Mode = limit.Mode

// PlanResolver maps a key to its plan. The Limiter calls it on the slow path
// only and caches the answer with the key's lease (it comes back with every
// Decision: Decision.Plan); call Limiter.InvalidateAll after the catalogue
// changes. See limit.PlanResolver.
type PlanResolver = limit.PlanResolver

// CostResolver maps an endpoint name to its cost weight: see
// limit.CostResolver.
type CostResolver = limit.CostResolver

// StaticPlans is a fixed PlanResolver: see limit.StaticPlans.
type StaticPlans = limit.StaticPlans

// StaticCosts is a fixed CostResolver: see limit.StaticCosts.
type StaticCosts = limit.StaticCosts

// The failure policies and modes: see limit.
const (
	FailDegraded = limit.FailDegraded
	FailOpen     = limit.FailOpen
	FailClosed   = limit.FailClosed
	ModeLeased   = limit.ModeLeased
	ModeExact    = limit.ModeExact
)

// Plan bounds, checked by Plan.Validate: see limit.
const (
	MinRate        = limit.MinRate
	MaxRate        = limit.MaxRate
	MaxCapacity    = limit.MaxCapacity
	MaxConcurrency = limit.MaxConcurrency
	MaxQuota       = limit.MaxQuota
)

// NewQuotas orders qs as Plan.Quotas holds them: limit.NewQuotas.
func NewQuotas(qs []Quota) ([store.MaxQuotaPeriods]Quota, error) { return limit.NewQuotas(qs) }

// planRef is a resolved plan as the entries of its keys share it, with its
// capacity as the integer limit the decision path compares costs with.
// Never modified once made.
type planRef struct {
	limit int64           // int64(Capacity); first, read on the fast path
	stats *planCounters   // the counters of the plan's name and policy, kept across InvalidateAll
	cal   period.Calendar // the quotas' calendar (Plan.Calendar)
	Plan
}
