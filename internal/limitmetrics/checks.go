package limitmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/region"
)

// Checks times single check requests server side, by the path their
// decision took: quota_check_duration_seconds{path="fast|slow|degraded"}.
// The time runs from the check handler's start to its response written, so
// it holds decoding and encoding but not the connection's queueing before
// the handler. The fast path is the one a lease serves: its p99 is the
// latency a client pays for a decision beyond its own network.
type Checks struct {
	duration *prometheus.HistogramVec
	byPath   [region.PathDegraded + 1]prometheus.Observer
}

// NewChecks returns the check-latency histogram. Register it and pass it to
// limitapi.Config.Checks.
func NewChecks() *Checks {
	c := &Checks{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "quota_check_duration_seconds",
		Help:    "Time to serve one single check, server side, by decision path (fast: from the lease; slow: with a store call; degraded).",
		Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 100e-3},
	}, []string{"path"})}
	for p := range c.byPath {
		// Resolved once: a lookup by label per check would allocate.
		c.byPath[p] = c.duration.WithLabelValues(region.Path(p).String())
	}
	return c
}

// ObserveCheck records one check's time.
func (c *Checks) ObserveCheck(p region.Path, d time.Duration) {
	if int(p) < len(c.byPath) {
		c.byPath[p].Observe(d.Seconds())
	}
}

// Describe implements prometheus.Collector.
func (c *Checks) Describe(ch chan<- *prometheus.Desc) { c.duration.Describe(ch) }

// Collect implements prometheus.Collector.
func (c *Checks) Collect(ch chan<- prometheus.Metric) { c.duration.Collect(ch) }
