package rls

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of quota_rls_hits_total, as envoyproxy/ratelimit names its
// per-descriptor statistics.
const (
	ResultOverLimit   = "over_limit"   // refused (not in shadow mode)
	ResultNearLimit   = "near_limit"   // allowed, leaving less than a fifth of the limit
	ResultWithinLimit = "within_limit" // allowed (near_limit hits included)
	ResultShadowMode  = "shadow_mode"  // over the limit in shadow mode: answered OK
)

// Metrics are the service's Prometheus counters. Labels are bounded by the
// configuration: domain, and descriptor, which is the rule's name (or its
// path of configured keys and values) only for rules with detailed_metric
// and "" otherwise; never a request's runtime values.
type Metrics struct {
	hits    *prometheus.CounterVec
	reloads *prometheus.CounterVec
}

// NewMetrics registers the counters on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_rls_hits_total",
			Help: "Hits (cost units) of rate limit service descriptors by result: over_limit, near_limit, within_limit, shadow_mode.",
		}, []string{"domain", "descriptor", "result"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_rls_config_loads_total",
			Help: "Loads of the rate limit service configuration by result: ok, error (the last good one stays in force).",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.hits, m.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls metrics: %w", err)
		}
	}
	return m, nil
}

// ConfigLoaded counts a load of the configuration; err nil is a success.
func (m *Metrics) ConfigLoaded(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
}

func (m *Metrics) hit(r *Rule, result string, hits int64) {
	if m == nil {
		return
	}
	label := ""
	if r.DetailedMetric {
		label = r.label
	}
	m.hits.WithLabelValues(r.Domain, label, result).Add(float64(hits))
}
