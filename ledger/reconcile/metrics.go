package reconcile

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Reconciler's Prometheus metrics; see NewMetrics.
type Metrics struct {
	Lag          prometheus.Gauge
	BatchSize    prometheus.Histogram
	BatchLatency prometheus.Histogram
	Reports      prometheus.Counter
	// Messages counts the messages received; a batch carries many reports.
	Messages     prometheus.Counter
	Redeliveries prometheus.Counter
	// Rejected counts reports refused before writing, by Reason (a message
	// that cannot be read at all counts once).
	Rejected *prometheus.CounterVec
	// DeadLetters counts dead letters recorded in usage_dead_letters, by
	// Reason.
	DeadLetters *prometheus.CounterVec
	Rebinds     prometheus.Counter
	Rows        *prometheus.CounterVec // result: inserted, updated, unchanged
	WriteErrors prometheus.Counter
	LastCommit  prometheus.Gauge
	// Parked counts reports handed back to the stream because Postgres
	// would not take them while it took others (Config.ParkDelay).
	Parked prometheus.Counter
	// BatchStarted is when the batch in progress started (Unix seconds on
	// Config.Clock), 0 between batches: a batch that does not end is a
	// stalled consumer.
	BatchStarted prometheus.Gauge
	// OldestUnwritten: see newOldestUnwritten (streamage.go).
	OldestUnwritten prometheus.Gauge
	// StreamFill: see newStreamFill (streamage.go).
	StreamFill prometheus.Gauge
}

// NewMetrics creates the Reconciler's metrics and registers them on reg
// (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Lag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "consumer_pending", Help: "Messages in the stream not yet delivered to the reconciler (consumer lag; a batch message carries up to 8,192 reports)."}),
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "batch_reports", Help: "Reports per committed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9)}),
		BatchLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "batch_write_seconds", Help: "Time to write one batch to Postgres (successful attempts).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		Reports: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "reports_total", Help: "Reports committed to the ledger and acknowledged."}),
		Messages: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "messages_total", Help: "Usage messages received (a batch message carries many reports); redeliveries count again."}),
		Redeliveries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "redeliveries_total", Help: "Messages delivered more than once by JetStream."}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "rejected_reports_total", Help: "Reports (or whole messages that could not be read) refused before writing and dead-lettered, by reason: invalid, out_of_range, subject, too_old, future."},
			[]string{"reason"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "dead_letters_total", Help: "Dead letters recorded in usage_dead_letters (a whole message, or one report of a batch), by reason: invalid, out_of_range, subject, too_old, future, refused (by Postgres), detached (month detached by retention), refund_exceeds_spent (written with its refund cut to its region's recent net of the key)."},
			[]string{"reason"}),
		Rebinds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "consumer_rebinds_total", Help: "Times the durable consumer was lost (e.g. deleted) and bound again."}),
		Rows: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "upsert_rows_total", Help: "Ledger rows by upsert result: inserted, updated (conflict, newer values), unchanged (duplicate or older)."},
			[]string{"result"}),
		WriteErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "write_errors_total", Help: "Failed Store calls: transient ones are retried with backoff, a batch Postgres refuses is split."}),
		LastCommit: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "last_commit_timestamp_seconds", Help: "Unix time of the last committed batch."}),
		OldestUnwritten: newOldestUnwritten(),
		StreamFill:      newStreamFill(),
		Parked: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "parked_reports_total", Help: "Reports handed back to the stream, to be written alone later, because Postgres would not take them while it took others (a lock, a resource)."}),
		BatchStarted: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "reconciler",
			Name: "batch_started_timestamp_seconds", Help: "Unix time the batch in progress started; 0 between batches. A batch that does not end is a stalled consumer."}),
	}
	for _, r := range reasons {
		if !foundByWriting(r) {
			m.Rejected.WithLabelValues(string(r))
		}
		m.DeadLetters.WithLabelValues(string(r))
	}
	if reg != nil {
		reg.MustRegister(m.Lag, m.BatchSize, m.BatchLatency, m.Reports, m.Messages, m.Redeliveries, m.Rejected, m.DeadLetters,
			m.Rebinds, m.Rows, m.WriteErrors, m.LastCommit, m.OldestUnwritten, m.StreamFill,
			m.Parked, m.BatchStarted)
	}
	return m
}
