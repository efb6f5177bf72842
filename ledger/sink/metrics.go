package sink

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the events runs. A nil *Metrics records nothing.
type Metrics struct {
	difference *prometheus.GaugeVec
	events     *prometheus.CounterVec
}

// NewMetrics registers the sink metrics on reg:
// quota_billing_sink_difference{sink} (gauge: closed periods' billed
// figures in the ledger minus what the sink acknowledged, over the last run's range) and
// quota_billing_sink_events_total{sink,result="sent|correction|resent|failed"}.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		difference: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_billing_sink_difference",
			Help: "Cost units of closed periods in the ledger that the sink has not acknowledged (ledger minus sink), over the last events run's range.",
		}, []string{"sink"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_billing_sink_events_total",
			Help: "Usage events delivered to or refused by a sink.",
		}, []string{"sink", "result"}),
	}
	reg.MustRegister(m.difference, m.events)
	return m
}

func (m *Metrics) setDifference(sink string, d int64) {
	if m != nil {
		m.difference.WithLabelValues(sink).Set(float64(d))
	}
}

func (m *Metrics) count(sink, result string) {
	if m != nil {
		m.events.WithLabelValues(sink, result).Inc()
	}
}

// Difference returns the gauge of sink, for tests and callers that read it.
func (m *Metrics) Difference(sink string) prometheus.Gauge { return m.difference.WithLabelValues(sink) }
