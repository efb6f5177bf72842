package sink

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the events runs. A nil *Metrics records nothing.
type Metrics struct {
	difference    *prometheus.GaugeVec
	keysDiffering *prometheus.GaugeVec
	absDifference *prometheus.GaugeVec
	held          *prometheus.GaugeVec
	events        *prometheus.CounterVec
}

// NewMetrics registers the sink metrics on reg, each set by a run over
// its range (the asked periods and the lookback):
// quota_billing_sink_difference{sink} (gauge: the ledger's billed figures
// minus what the sink acknowledged, summed over keys; kept for
// dashboards, it can net to 0 while keys differ),
// quota_sink_keys_differing{sink} (keys with a period whose figures
// differ), quota_sink_abs_difference{sink} (cost units: the sum of those
// differences' absolute values), quota_sink_held_events{sink} (events
// unacknowledged past the sink's dedupe window, held for a person) and
// quota_billing_sink_events_total{sink,result="sent|correction|resent|failed|held"}.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"sink"})
	}
	m := &Metrics{
		difference: gauge("quota_billing_sink_difference",
			"Cost units in the ledger that the sink has not acknowledged (ledger minus sink), summed over keys, over the last events run's range."),
		keysDiffering: gauge("quota_sink_keys_differing",
			"Keys with a period whose billed figure in the ledger differs from what the sink acknowledged, after the last run."),
		absDifference: gauge("quota_sink_abs_difference",
			"Cost units: sum over keys and periods of |ledger billed − sink acknowledged|, after the last run."),
		held: gauge("quota_sink_held_events",
			"Events unacknowledged past the sink's dedupe window, held for a person to settle (not re-sent)."),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_billing_sink_events_total",
			Help: "Usage events delivered to, refused by or held from a sink.",
		}, []string{"sink", "result"}),
	}
	reg.MustRegister(m.difference, m.keysDiffering, m.absDifference, m.held, m.events)
	return m
}

func (m *Metrics) setDifference(sink string, d int64, keys int, abs int64) {
	if m != nil {
		m.difference.WithLabelValues(sink).Set(float64(d))
		m.keysDiffering.WithLabelValues(sink).Set(float64(keys))
		m.absDifference.WithLabelValues(sink).Set(float64(abs))
	}
}

func (m *Metrics) setHeld(sink string, n int) {
	if m != nil {
		m.held.WithLabelValues(sink).Set(float64(n))
	}
}

func (m *Metrics) count(sink, result string) {
	if m != nil {
		m.events.WithLabelValues(sink, result).Inc()
	}
}

// Difference returns the summed difference gauge of sink.
func (m *Metrics) Difference(sink string) prometheus.Gauge { return m.difference.WithLabelValues(sink) }

// KeysDiffering returns the differing-keys gauge of sink.
func (m *Metrics) KeysDiffering(sink string) prometheus.Gauge {
	return m.keysDiffering.WithLabelValues(sink)
}

// Held returns the held-events gauge of sink.
func (m *Metrics) Held(sink string) prometheus.Gauge { return m.held.WithLabelValues(sink) }
