package planmirror

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the mirror's Prometheus metrics.
type Metrics struct {
	// Revision is the bucket revision the ledger's tables are current to.
	Revision prometheus.Gauge
	// Synced is 1 once the bucket's full state is written, 0 while the
	// mirror (re)reads it.
	Synced prometheus.Gauge
	// Failures counts failed watches and writes (each followed by a full
	// re-read after Config.RetryInterval).
	Failures prometheus.Counter
	// Skipped counts entries that did not decode or validate.
	Skipped prometheus.Counter
}

// NewMetrics returns the metrics, registered with reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Revision: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quota_plan_mirror_revision",
			Help: "Catalogue bucket revision the ledger's quota_plans and quota_key_plans are current to."}),
		Synced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "quota_plan_mirror_synced",
			Help: "1 once the catalogue's full state is mirrored into the ledger, 0 while it is (re)read."}),
		Failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "quota_plan_mirror_failures_total",
			Help: "Failed catalogue watches or ledger writes of the plan mirror; each is retried with a full re-read."}),
		Skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "quota_plan_mirror_skipped_total",
			Help: "Catalogue entries the plan mirror skipped because they did not decode or validate."}),
	}
	if reg != nil {
		reg.MustRegister(m.Revision, m.Synced, m.Failures, m.Skipped)
	}
	return m
}
