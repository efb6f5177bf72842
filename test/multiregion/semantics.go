package multiregion

import (
	"fmt"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// Per-plan semantics in the harness (docs/design.md [plan-semantics]): an
// exact key in every scenario, a closed-policy key through the Redis kill.
// The scenarios' use of them is in semantics_test.go.

// PlanFields is a plan as PUT /v1/limits/{plan} takes it and GET
// /v1/keys/{key} shows it, with its semantics ("" leaves a field at its
// default) and its calendar quotas (none: no quotas; TimeZone "" is UTC,
// AnchorDay 0 the 1st).
type PlanFields struct {
	Rate          float64 `json:"rate"`
	Capacity      float64 `json:"capacity"`
	FailurePolicy string  `json:"failure_policy,omitempty"`
	Mode          string  `json:"mode,omitempty"`
	Quotas        []Quota `json:"quotas,omitempty"`
	TimeZone      string  `json:"time_zone,omitempty"`
	AnchorDay     int     `json:"anchor_day,omitempty"`
}

// SetPlanFields creates or changes a plan, semantics included, through the
// control-plane API.
func (c *Cluster) SetPlanFields(plan string, p PlanFields) {
	c.t.Helper()
	c.put("/v1/limits/"+url.PathEscape(plan), p, 30*time.Second)
}

// WaitPlanFields waits until every live node resolves each key to a plan
// with p's rate, capacity, failure policy, mode and quotas (GET
// /v1/keys/{key}): the push of the catalogue has converged.
func (c *Cluster) WaitPlanFields(timeout time.Duration, p PlanFields, keys ...string) {
	c.t.Helper()
	testserver.WaitFor(c.t, timeout, 50*time.Millisecond, func() error {
		for _, n := range c.Nodes() {
			if n.Crashed() {
				continue
			}
			for _, k := range keys {
				var v PlanFields
				if err := getJSONWith(c.client, n.URL()+"/v1/keys/"+url.PathEscape(k), c.spec.AdminToken, &v); err != nil {
					return fmt.Errorf("%s: %w", n.Name(), err)
				}
				if v.Rate != p.Rate || v.Capacity != p.Capacity || (p.FailurePolicy != "" && v.FailurePolicy != p.FailurePolicy) || (p.Mode != "" && v.Mode != p.Mode) ||
					!sameQuotas(v.Quotas, p.Quotas) {
					return fmt.Errorf("%s sees key %s as %+v, want %+v", n.Name(), k, v, p)
				}
			}
		}
		return nil
	})
}

// Observed is one decision a client saw, with when its request was sent and
// its answer read (since the start of the run). Traffic.Observe receives
// every decision of the run.
type Observed struct {
	Key, Region, Process string
	Cost                 int64
	Allowed, Degraded    bool
	FailurePolicy        string // "" unless Degraded
	Start, End           time.Duration
	// Tightest, QuotaRejected and Quotas are the answer's quota fields
	// (docs/design.md [quotas]), from the daemon's check API only: ""
	// false and nil for a key whose plan has no quotas.
	Tightest      string
	QuotaRejected bool
	Quotas        []QuotaRemaining
}

// decisionLog keeps the decisions of a few keys, in full: the per-key
// figures that the per-second Record does not hold (client latency, the
// instant of each decision, the failure policy named).
type decisionLog struct {
	keys map[string]bool

	mu  sync.Mutex
	evs map[string][]Observed // guarded by mu
}

func newDecisionLog(keys ...string) *decisionLog {
	l := &decisionLog{keys: map[string]bool{}, evs: map[string][]Observed{}}
	for _, k := range keys {
		l.keys[k] = true
	}
	return l
}

// observe is a Traffic.Observe: it keeps the decisions of the log's keys.
func (l *decisionLog) observe(o Observed) {
	if !l.keys[o.Key] {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs[o.Key] = append(l.evs[o.Key], o)
}

// events returns key's decisions, in the order their answers were read.
func (l *decisionLog) events(key string) []Observed {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Observed(nil), l.evs[key]...)
}

// latency returns the p-quantile of evs' client-side latency (request sent
// to answer read, one check per call).
func latency(evs []Observed, p float64) time.Duration {
	ds := make([]time.Duration, len(evs))
	for i, e := range evs {
		ds[i] = e.End - e.Start
	}
	return percentile(ds, p)
}

// intervalExcess is the worst interval of a run for a token bucket of rate
// and capacity: over every interval [t, t'] whose ends are instants of the
// allowed decisions in evs, the cost admitted by the decisions wholly
// inside it (request sent at or after t, answer read at or before t', so
// that the store took their cost within the interval) less what a bucket
// can give out over it, rate·(t' − t) + capacity. An exact limiter never
// gives a positive excess. It returns the excess, the interval and the
// cost admitted in it.
func intervalExcess(evs []Observed, rate, capacity float64) (excess float64, from, to time.Duration, admitted int64) {
	var al []Observed
	for _, e := range evs {
		if e.Allowed {
			al = append(al, e)
		}
	}
	excess = -capacity
	if len(al) == 0 {
		return excess, 0, 0, 0
	}
	byEnd := append([]Observed(nil), al...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
	first := true
	for _, a := range al {
		t := a.Start
		var sum int64
		for _, b := range byEnd {
			if b.Start < t {
				continue
			}
			sum += b.Cost
			if x := float64(sum) - rate*(b.End-t).Seconds() - capacity; first || x > excess {
				excess, from, to, admitted, first = x, t, b.End, sum, false
			}
		}
	}
	return excess, from, to, admitted
}

// within selects the decisions whose request was sent after from and whose
// answer was read before to, in region ("" for all).
func within(evs []Observed, region string, from, to time.Duration) []Observed {
	var out []Observed
	for _, e := range evs {
		if (region == "" || e.Region == region) && e.Start > from && e.End < to {
			out = append(out, e)
		}
	}
	return out
}

// tally adds up decisions: cost allowed, allowed in degraded mode, rejected
// in degraded mode under the closed policy, degraded under any other
// policy, and all demanded cost.
type tally struct {
	Decisions                        int
	Allowed, AllowedDegraded, Demand int64
	ClosedRejected, OtherPolicy      int64
	LastDegradedAt                   time.Duration
}

func tallyOf(evs []Observed) tally {
	var t tally
	for _, e := range evs {
		t.Decisions++
		t.Demand += e.Cost
		if e.Allowed {
			t.Allowed += e.Cost
		}
		if !e.Degraded {
			continue
		}
		t.LastDegradedAt = max(t.LastDegradedAt, e.End)
		switch {
		case e.FailurePolicy != "closed":
			t.OtherPolicy++
		case e.Allowed:
			t.AllowedDegraded += e.Cost
		default:
			t.ClosedRejected++
		}
	}
	return t
}
