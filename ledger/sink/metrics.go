package sink

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the events runs. A nil *Metrics records nothing.
type Metrics struct {
	difference    *prometheus.GaugeVec
	keysDiffering *prometheus.GaugeVec
	absDifference *prometheus.GaugeVec
	held          *prometheus.GaugeVec
	unsent        *prometheus.GaugeVec
	oldestUnsent  *prometheus.GaugeVec
	unmapped      *prometheus.GaugeVec
	events        *prometheus.CounterVec
}

// NewMetrics registers the sink metrics on reg. Over the sink's whole
// table, however old: quota_sink_held_events{sink} (events unacknowledged
// past the sink's dedupe window, held for a person to settle),
// quota_sink_unsent_events{sink} (events not acknowledged: pending, failed
// or held) and quota_sink_oldest_unsent_seconds{sink} (the age of the
// oldest such period's end, 0 if none). Set by a run over its range (the
// asked periods, the lookback, back to the watermark):
// quota_billing_sink_difference{sink} (gauge: the ledger's billed figures
// minus what the sink acknowledged, summed over keys; kept for
// dashboards, it can net to 0 while keys differ),
// quota_sink_keys_differing{sink} (keys with a period whose figures
// differ), quota_sink_abs_difference{sink} (cost units: the sum of those
// differences' absolute values), quota_sink_unmapped_keys{sink} (keys
// billed in the ledger that the sink skips: Stripe keys without a
// customer, kept out of the two before) and
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
			"Events unacknowledged past the sink's dedupe window, held for a person to settle (not re-sent), over the whole table."),
		unsent: gauge("quota_sink_unsent_events",
			"Events the sink has not acknowledged (pending, failed or held), however old their periods."),
		oldestUnsent: gauge("quota_sink_oldest_unsent_seconds",
			"Seconds since the end of the oldest complete period whose event the sink has not acknowledged; 0 if none."),
		unmapped: gauge("quota_sink_unmapped_keys",
			"Keys billed in the ledger that the sink skips (Stripe: no customer mapped for the period), after the last run."),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_billing_sink_events_total",
			Help: "Usage events delivered to, refused by or held from a sink.",
		}, []string{"sink", "result"}),
	}
	reg.MustRegister(m.difference, m.keysDiffering, m.absDifference, m.held, m.unsent, m.oldestUnsent, m.unmapped, m.events)
	return m
}

func (m *Metrics) setDifference(sink string, d int64, keys int, abs int64, unmapped int) {
	if m != nil {
		m.unmapped.WithLabelValues(sink).Set(float64(unmapped))
		m.difference.WithLabelValues(sink).Set(float64(d))
		m.keysDiffering.WithLabelValues(sink).Set(float64(keys))
		m.absDifference.WithLabelValues(sink).Set(float64(abs))
	}
}

func (m *Metrics) setUnsent(sink string, held, unsent int, oldest, now time.Time) {
	if m != nil {
		m.held.WithLabelValues(sink).Set(float64(held))
		m.unsent.WithLabelValues(sink).Set(float64(unsent))
		age := 0.0
		if !oldest.IsZero() {
			age = max(0, now.Sub(oldest).Seconds())
		}
		m.oldestUnsent.WithLabelValues(sink).Set(age)
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

// Unsent returns the unsent-events gauge of sink.
func (m *Metrics) Unsent(sink string) prometheus.Gauge { return m.unsent.WithLabelValues(sink) }

// OldestUnsent returns the oldest-unsent-period age gauge of sink.
func (m *Metrics) OldestUnsent(sink string) prometheus.Gauge {
	return m.oldestUnsent.WithLabelValues(sink)
}

// Unmapped returns the unmapped-keys gauge of sink.
func (m *Metrics) Unmapped(sink string) prometheus.Gauge { return m.unmapped.WithLabelValues(sink) }

// Held returns the held-events gauge of sink.
func (m *Metrics) Held(sink string) prometheus.Gauge { return m.held.WithLabelValues(sink) }
