package limitmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/region"
)

// StatsSource is what the Collector reads of a region.Limiter.
type StatsSource interface {
	Stats() region.Stats
}

// PlanStatsSource is what the Collector reads of a region.Limiter's
// per-plan counters, when the StatsSource has them.
type PlanStatsSource interface {
	PlanStats() []region.PlanStats
}

// ConfigSource is what the Collector reads of a catalog.Catalog.
type ConfigSource interface {
	Version() uint64
	Synced() bool
}

// Collector reads limiter and catalogue state at scrape time.
type Collector struct {
	limiter StatsSource
	config  ConfigSource // may be nil
}

// NewCollector returns a Collector over limiter and, when not nil, config.
func NewCollector(limiter StatsSource, config ConfigSource) *Collector {
	return &Collector{limiter: limiter, config: config}
}

var (
	descDecisions   = prometheus.NewDesc("quota_decisions_total", "Decisions taken, by result (shadow_rejected: allowed by a shadow plan that would have rejected them).", []string{"result"}, nil)
	descPlanDec     = prometheus.NewDesc("quota_plan_decisions_total", "Decisions that depend on a plan's semantics, by plan, the failure policy that applied, and result: degraded_allowed and degraded_rejected while the store was unavailable, shadow_rejected.", []string{"plan", "failure_policy", "result"}, nil)
	descDegradedDec = prometheus.NewDesc("quota_degraded_decisions_total", "Decisions taken from a degraded local bucket (store unavailable).", nil, nil)
	descDegraded    = prometheus.NewDesc("quota_degraded", "1 while the circuit breaker is not closed (decisions degrade), else 0.", nil, nil)
	descBreaker     = prometheus.NewDesc("quota_breaker_state", "Circuit breaker state: 0 closed, 1 open, 2 half-open.", nil, nil)
	descOutstanding = prometheus.NewDesc("quota_outstanding_permits", "Permits leased and not yet spent or returned.", nil, nil)
	descKeys        = prometheus.NewDesc("quota_tracked_keys", "Keys holding local limiter state.", nil, nil)
	descProcesses   = prometheus.NewDesc("quota_processes", "Process count used for lease caps and degraded floors.", nil, nil)
	descOffset      = prometheus.NewDesc("quota_clock_offset_seconds", "Store clock minus local clock, learned from lease replies.", nil, nil)
	descVersion     = prometheus.NewDesc("quota_config_version", "Catalogue version: the NATS KV revision of the last applied change.", nil, nil)
	descSynced      = prometheus.NewDesc("quota_config_synced", "1 once the catalogue has been read from NATS, 0 while only the cached copy is in use.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descDegradedDec, descDegraded, descBreaker,
		descOutstanding, descKeys, descProcesses, descOffset} {
		ch <- d
	}
	if _, ok := c.limiter.(PlanStatsSource); ok {
		ch <- descPlanDec
	}
	if c.config != nil {
		ch <- descVersion
		ch <- descSynced
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.limiter.Stats()
	ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(s.Allowed), "allowed")
	ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(s.Rejected), "rejected")
	ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(s.ShadowRejected), "shadow_rejected")
	if ps, ok := c.limiter.(PlanStatsSource); ok {
		for _, p := range ps.PlanStats() {
			policy := string(p.Policy)
			ch <- prometheus.MustNewConstMetric(descPlanDec, prometheus.CounterValue, float64(p.DegradedAllowed), p.Plan, policy, "degraded_allowed")
			ch <- prometheus.MustNewConstMetric(descPlanDec, prometheus.CounterValue, float64(p.DegradedRejected), p.Plan, policy, "degraded_rejected")
			ch <- prometheus.MustNewConstMetric(descPlanDec, prometheus.CounterValue, float64(p.ShadowRejected), p.Plan, policy, "shadow_rejected")
		}
	}
	ch <- prometheus.MustNewConstMetric(descDegradedDec, prometheus.CounterValue, float64(s.DegradedDecisions))
	ch <- prometheus.MustNewConstMetric(descDegraded, prometheus.GaugeValue, boolFloat(s.Breaker != region.BreakerClosed))
	ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, float64(s.Breaker))
	ch <- prometheus.MustNewConstMetric(descOutstanding, prometheus.GaugeValue, float64(s.OutstandingPermits))
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(s.TrackedKeys))
	ch <- prometheus.MustNewConstMetric(descProcesses, prometheus.GaugeValue, float64(s.Processes))
	ch <- prometheus.MustNewConstMetric(descOffset, prometheus.GaugeValue, s.ClockOffset.Seconds())
	if c.config != nil {
		ch <- prometheus.MustNewConstMetric(descVersion, prometheus.GaugeValue, float64(c.config.Version()))
		ch <- prometheus.MustNewConstMetric(descSynced, prometheus.GaugeValue, boolFloat(c.config.Synced()))
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
