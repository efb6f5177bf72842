package limit

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/store"
)

// Plan is a token bucket: Rate cost units per second refill a bucket holding
// at most Capacity cost units. A plan holds for one key across all processes
// and all regions together.
//
// Rate is at least MinRate (1e-6 per second, about 31 cost units a year):
// a slower plan is not a rate limit, and the store's arithmetic (the
// bucket's expiry, twice its time to fill) must stay finite. A bucket that
// takes longer than store.MaxBucketTTL/2 to fill (Capacity/Rate above 183 days)
// is forgotten by the store after store.MaxBucketTTL without a write, and comes
// back full. Rate and Capacity are at most MaxRate and MaxCapacity (1e12):
// one accounting window's usage (rate·60 s + capacity, about 6.1e13) then
// stays below the reconciler's per-report bound (2^53 − 1, exact in JSON),
// and a month of such windows still sums within Postgres' bigint.
type Plan struct {
	// Name names the plan, for the RateLimit-Policy response field; the
	// catalogue fills it in, and the Limiter hands it back with every
	// decision (region.Decision.Plan).
	// It plays no part in deciding. Default "" (unnamed).
	Name string
	// Rate is the refill rate in cost units per second, in [MinRate,
	// MaxRate].
	Rate float64
	// Capacity is the burst size in cost units, in [1, MaxCapacity].
	Capacity float64

	// FailurePolicy is what the key's decisions do while the regional
	// store is unavailable (docs/design.md [plan-semantics]): decide from
	// the traffic-weighted local bucket (FailDegraded, the default for a
	// leased plan), allow (FailOpen) or reject (FailClosed, the only
	// policy of an exact plan). Every such decision is flagged Degraded.
	// Default "" (FailDegraded, or FailClosed when Mode is ModeExact).
	FailurePolicy FailurePolicy
	// Mode is how the key's decisions reach the store: ModeLeased spends
	// leased permits locally; ModeExact makes one atomic store call per
	// decision and never admits past the region's part of the limit, under
	// any fault. Default "" (ModeLeased).
	Mode Mode
	// Shadow computes, counts and reports decisions as usual but allows
	// every check: a check the plan would have rejected is allowed with
	// region.Decision.ShadowRejected set, and its cost is counted in
	// Usage.WouldReject instead of Usage.Rejected. Default false.
	Shadow bool
	// Concurrency, when positive, is the most slots (in-flight requests)
	// a key may hold at once in this region, taken with region.Limiter.Acquire
	// and given back with Release. It is independent of the token
	// bucket, which Allow alone spends. At most MaxConcurrency. Default 0
	// (Acquire refuses the key's plan).
	Concurrency int

	// Quotas are the plan's calendar quotas (docs/design.md [quotas]): at
	// most Limit cost units per period, for the key across all regions,
	// beside the bucket. A check is allowed only if the bucket and every
	// quota can afford it. Used entries come first, shortest period
	// first (NewQuotas orders them), each period at most once; the rest
	// are zero. Default none.
	Quotas [store.MaxQuotaPeriods]Quota
	// TimeZone is the IANA zone whose calendar the quotas' periods
	// follow. Default "" (UTC).
	TimeZone string
	// AnchorDay is the day of the month the quotas' months start on, 1 to
	// 31 (a shorter month starts on its last day). Default 0 (the 1st).
	AnchorDay int
}

// Quota is one calendar quota of a plan: at most Limit cost units per
// Period, in the plan's calendar. Its JSON form is the catalogue's and
// the HTTP API's: {"period":"month","limit":1000000}.
type Quota struct {
	Period period.Unit `json:"period"`
	Limit  int64       `json:"limit"` // 1 to MaxQuota
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
	// MaxConcurrency is the most slots a plan's Concurrency may hold.
	MaxConcurrency = 1_000_000
	// MaxQuota is the largest quota limit: exact in a Lua number.
	MaxQuota = store.MaxCount
)

// NewQuotas orders qs as Plan.Quotas holds them (shortest period first)
// and checks each, naming the bad one's field as quotas[i].period or
// quotas[i].limit by its place in qs.
func NewQuotas(qs []Quota) ([store.MaxQuotaPeriods]Quota, error) {
	var out [store.MaxQuotaPeriods]Quota
	if len(qs) > store.MaxQuotaPeriods {
		return out, planError("quotas", fmt.Sprintf("quotas: at most %d (one per period), got %d", store.MaxQuotaPeriods, len(qs)))
	}
	var errs []error
	seen := map[period.Unit]int{}
	for i, q := range qs {
		field := fmt.Sprintf("quotas[%d].period", i)
		if _, err := period.ParseUnit(string(q.Period)); err != nil {
			errs = append(errs, planError(field, fmt.Sprintf("%s must be one of hour, day, week, month, got %q", field, q.Period)))
		} else if j, dup := seen[q.Period]; dup {
			errs = append(errs, planError(field, fmt.Sprintf("%s %q repeats quotas[%d]", field, q.Period, j)))
		}
		seen[q.Period] = i
		if q.Limit < 1 || q.Limit > MaxQuota {
			field := fmt.Sprintf("quotas[%d].limit", i)
			errs = append(errs, planError(field, fmt.Sprintf("%s must be an integer in [1, %d] cost units, got %d", field, int64(MaxQuota), q.Limit)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	n := 0
	for _, u := range period.Units {
		if i, ok := seen[u]; ok {
			out[n] = qs[i]
			n++
		}
	}
	return out, nil
}

// QuotaList returns the plan's quotas, shortest period first.
func (p Plan) QuotaList() []Quota {
	n := p.quotaCount()
	return p.Quotas[:n:n]
}

func (p Plan) quotaCount() int {
	n := 0
	for n < store.MaxQuotaPeriods && p.Quotas[n].Period != "" {
		n++
	}
	return n
}

// HasQuotas reports whether the plan has a quota.
func (p Plan) HasQuotas() bool { return p.Quotas[0].Period != "" }

// Calendar returns the calendar of the plan's quotas: its TimeZone and
// AnchorDay. Zones are loaded once per process.
func (p Plan) Calendar() (period.Calendar, error) {
	if p.AnchorDay < 0 || p.AnchorDay > 31 {
		return period.Calendar{}, planError("anchor_day", fmt.Sprintf("anchor_day must be 1 to 31 (0: the 1st), got %d", p.AnchorDay))
	}
	loc, err := loadZone(p.TimeZone)
	if err != nil {
		return period.Calendar{}, err
	}
	return period.Calendar{Location: loc, AnchorDay: p.AnchorDay}, nil
}

// zones caches loaded time zones (name → *time.Location): loading reads
// the zone database, and plans are validated on every slow path.
var zones sync.Map

func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	c, err := period.NewCalendar(name, 0)
	if err != nil {
		return nil, planError("time_zone", err.Error())
	}
	zones.Store(name, c.Location)
	return c.Location, nil
}

// Policy is the failure policy that applies to p: FailurePolicy, or its
// default for p's mode.
func (p Plan) Policy() FailurePolicy {
	switch {
	case p.FailurePolicy != "":
		return p.FailurePolicy
	case p.Mode == ModeExact:
		return FailClosed
	}
	return FailDegraded
}

// Exact reports whether p is in exact mode.
func (p Plan) Exact() bool { return p.Mode == ModeExact }

// Validate reports whether p is usable. A bad field is a *FieldError
// naming it; the error wraps ErrInvalidPlan.
func (p Plan) Validate() error {
	switch {
	case !(p.Rate >= MinRate && p.Rate <= MaxRate): // NaN fails both
		return planError("rate", fmt.Sprintf("rate must be a number in [%g, %g] cost units per second, got %v", float64(MinRate), float64(MaxRate), p.Rate))
	case !(p.Capacity >= 1 && p.Capacity <= MaxCapacity):
		return planError("capacity", fmt.Sprintf("capacity must be a number in [1, %g] cost units, got %v", float64(MaxCapacity), p.Capacity))
	case p.FailurePolicy != "" && !p.FailurePolicy.Valid():
		return planError("failure_policy", fmt.Sprintf("failure_policy must be %s, got %q", quoted(FailurePolicies), string(p.FailurePolicy)))
	case p.Mode != "" && !p.Mode.Valid():
		return planError("mode", fmt.Sprintf("mode must be %s, got %q", quoted(Modes), string(p.Mode)))
	case p.Mode == ModeExact && p.Policy() != FailClosed:
		return planError("failure_policy", fmt.Sprintf("failure_policy must be %q for an exact plan (exact never admits what the store did not grant), got %q", FailClosed, string(p.FailurePolicy)))
	case p.Concurrency < 0 || p.Concurrency > MaxConcurrency:
		return planError("concurrency", fmt.Sprintf("concurrency must be an integer in [0, %d] slots, got %d", MaxConcurrency, p.Concurrency))
	}
	return p.validateQuotas()
}

// validateQuotas checks the quota fields: packed and ordered as NewQuotas
// leaves them, and a calendar that loads.
func (p Plan) validateQuotas() error {
	if !p.HasQuotas() && p.TimeZone == "" && p.AnchorDay == 0 {
		return nil
	}
	n := p.quotaCount()
	for i := n; i < store.MaxQuotaPeriods; i++ {
		if p.Quotas[i] != (Quota{}) {
			return planError("quotas", fmt.Sprintf("quotas[%d] follows an empty quota: use NewQuotas", i))
		}
	}
	ordered, err := NewQuotas(p.Quotas[:n])
	if err != nil {
		return err
	}
	if ordered != p.Quotas {
		return planError("quotas", "quotas must be ordered shortest period first: use NewQuotas")
	}
	if n > 0 && p.Mode == ModeExact {
		return planError("quotas", fmt.Sprintf("quotas are not supported on an exact plan (mode %q): use a leased plan", ModeExact))
	}
	_, err = p.Calendar()
	return err
}

// PlanResolver maps a key to its plan. A limiter calls it on its slow path
// only and caches the answer; implementations must be safe for concurrent
// use and must not block on I/O. An unknown key must yield an error
// wrapping ErrUnknownPlan.
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
