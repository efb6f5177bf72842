package quotabase

import "github.com/prometheus/client_golang/prometheus"

// Results a request is counted under in
// quota_reconciler_quota_base_requests_total{result}.
const (
	ResultOK      = "ok"      // answered with a base
	ResultInvalid = "invalid" // a bad request, answered with the field
	ResultBusy    = "busy"    // Config.MaxConcurrent queries already running
	ResultError   = "error"   // the ledger could not be read
)

// Metrics are the Server's Prometheus metrics; see NewMetrics.
type Metrics struct {
	// Requests counts requests by result: ok, invalid, busy, error.
	Requests *prometheus.CounterVec
	// Latency is the time from a request's arrival to its reply, for
	// requests that ran a query (ok and error).
	Latency prometheus.Histogram
	// InFlight is the queries running now, at most Config.MaxConcurrent.
	InFlight prometheus.Gauge
}

// NewMetrics creates the Server's metrics and registers them on reg (nil:
// not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "quota_base_requests_total",
			Help: "Quota-base requests answered, by result: ok, invalid (a bad request), busy (too many queries running), error (the ledger could not be read)."},
			[]string{"result"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "quota_base_seconds", Help: "Time from a quota-base request's arrival to its reply, for requests that queried the ledger.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "quota_base_in_flight", Help: "Quota-base queries running now (at most the Server's MaxConcurrent)."}),
	}
	for _, r := range []string{ResultOK, ResultInvalid, ResultBusy, ResultError} {
		m.Requests.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Latency, m.InFlight)
	}
	return m
}
