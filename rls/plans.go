package rls

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/quotaplatform/quota/region"
)

// Rules holds the Config in force and the one before it. The zero value
// holds none (every domain is unknown). Safe for concurrent use.
type Rules struct {
	cur atomic.Pointer[rulesState]
}

type rulesState struct {
	cfg, prev  *Config
	generation uint64
}

// Set puts c in force; the config it replaces stays known to Plans, so
// that a decision whose key was made just before the swap still resolves.
// The caller then invalidates the limiter's cached plans
// (region.Limiter.InvalidateAll).
func (r *Rules) Set(c *Config) {
	for {
		old := r.cur.Load()
		next := &rulesState{cfg: c, generation: 1}
		if old != nil {
			next.prev, next.generation = old.cfg, old.generation+1
		}
		if r.cur.CompareAndSwap(old, next) {
			return
		}
	}
}

// Config returns the Config in force, nil before the first Set.
func (r *Rules) Config() *Config {
	if s := r.cur.Load(); s != nil {
		return s.cfg
	}
	return nil
}

// Generation counts Sets: 0 before the first.
func (r *Rules) Generation() uint64 {
	if s := r.cur.Load(); s != nil {
		return s.generation
	}
	return 0
}

// Plans is the region.PlanResolver of a limiter that serves both rls keys
// and others: a key starting with KeyPrefix gets the plan of its rule in
// Rules (or of its limit override), every other key is Fallback's (the
// catalogue).
type Plans struct {
	rules    *Rules
	fallback region.PlanResolver
}

// NewPlans returns the resolver of rules' keys, deferring every other key
// to fallback.
func NewPlans(rules *Rules, fallback region.PlanResolver) (*Plans, error) {
	if rules == nil || fallback == nil {
		return nil, fmt.Errorf("rls: plans: rules and fallback must not be nil")
	}
	return &Plans{rules: rules, fallback: fallback}, nil
}

// Plan implements region.PlanResolver.
func (p *Plans) Plan(key string) (region.Plan, error) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return p.fallback.Plan(key)
	}
	id, _, _ := strings.Cut(rest, ":")
	if strings.HasPrefix(id, "o") {
		return parseOverrideID(id)
	}
	if s := p.rules.cur.Load(); s != nil {
		for _, c := range []*Config{s.cfg, s.prev} {
			if c == nil {
				continue
			}
			if r := c.rules[id]; r != nil && !r.Unlimited && r.RequestsPerUnit > 0 {
				return r.plan, nil
			}
		}
	}
	return region.Plan{}, fmt.Errorf("%w: rate limit descriptor %q is not configured", region.ErrUnknownPlan, id)
}

var _ region.PlanResolver = (*Plans)(nil)
