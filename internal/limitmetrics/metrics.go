package limitmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/region"
)

// Observer implements region.Observer with Prometheus metrics. Create it
// with NewObserver and register it (it is a prometheus.Collector).
type Observer struct {
	storeOK, storeErr prometheus.Counter
	storeLatency      prometheus.Histogram
	leaseGranted      prometheus.Histogram
	transitions       *prometheus.CounterVec
	calls             *prometheus.CounterVec
}

var _ region.Observer = (*Observer)(nil)

// NewObserver returns an Observer.
func NewObserver() *Observer {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quota_store_calls_total", Help: "Regional store calls (leases and returns), by result.",
	}, []string{"result"})
	o := &Observer{
		storeOK:  calls.WithLabelValues("ok"),
		storeErr: calls.WithLabelValues("error"),
		storeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quota_store_call_duration_seconds",
			Help:    "Latency of regional store calls, failures included.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 100e-3},
		}),
		leaseGranted: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "quota_lease_granted_permits",
			Help:    "Permits granted per lease call (calls that only return permits are excluded).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_breaker_transitions_total", Help: "Circuit breaker transitions, by the state entered.",
		}, []string{"state"}),
	}
	o.calls = calls
	return o
}

// StoreCall implements region.Observer.
func (o *Observer) StoreCall(latency time.Duration, want, granted int64, err error) {
	o.storeLatency.Observe(latency.Seconds())
	if err != nil {
		o.storeErr.Inc()
		return
	}
	o.storeOK.Inc()
	if want > 0 {
		o.leaseGranted.Observe(float64(granted))
	}
}

// BreakerState implements region.Observer.
func (o *Observer) BreakerState(s region.BreakerState) {
	o.transitions.WithLabelValues(s.String()).Inc()
}

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.calls.Describe(ch)
	o.storeLatency.Describe(ch)
	o.leaseGranted.Describe(ch)
	o.transitions.Describe(ch)
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.calls.Collect(ch)
	o.storeLatency.Collect(ch)
	o.leaseGranted.Collect(ch)
	o.transitions.Collect(ch)
}
