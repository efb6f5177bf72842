package ledger

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Reporter's Prometheus metrics. Create them with
// NewMetrics and register them on the caller's registry; a nil *Metrics
// (Config.Metrics unset) records nothing.
type Metrics struct {
	Published prometheus.Counter
	// Messages counts the JetStream messages that carried them: with
	// batching, far fewer than Published.
	Messages   prometheus.Counter
	Spooled    prometheus.Counter
	PublishErr prometheus.Counter
	SpoolFull  prometheus.Counter
	// SpoolFullNow is 1 while reports are waiting in memory because the
	// spool is full: alarm on it.
	SpoolFullNow  prometheus.Gauge
	SpoolReports  prometheus.Gauge
	SpoolBytes    prometheus.Gauge
	Entries       prometheus.Gauge
	Unacknowledge prometheus.Gauge
	LateDeltas    prometheus.Counter
	// CapFlushes counts the flushes that found Config.MaxKeys windows or
	// more held and freed windows early; FreedEarly the windows they freed
	// (their final reports accepted). Entries is the windows held.
	CapFlushes prometheus.Counter
	FreedEarly prometheus.Counter
	// DurableSeconds is how long RecordDurable (a refund's or charge's
	// usage) took to publish or spool; DurableFailures counts the calls
	// that could do neither (the API answered 503, the usage waits in
	// memory).
	DurableSeconds  prometheus.Histogram
	DurableFailures prometheus.Counter
	// StreamFull counts the messages the usage stream refused for want of
	// space: alarm on any increase.
	StreamFull prometheus.Counter
}

// NewMetrics creates the Reporter's metrics and registers them on reg (nil:
// not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Published: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "reports_published_total", Help: "Usage reports accepted by JetStream (spool drains included)."}),
		Messages: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "messages_published_total", Help: "JetStream messages of usage reports accepted (a batch carries many reports)."}),
		Spooled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "reports_spooled_total", Help: "Usage reports written to the local spool because NATS was unreachable."}),
		PublishErr: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "publish_errors_total", Help: "Usage report publishes that failed or timed out."}),
		SpoolFull: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "spool_full_total", Help: "Reports that did not fit in the spool (kept in memory and retried, never dropped)."}),
		SpoolFullNow: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "spool_full", Help: "1 while the spool is full and reports wait in memory only."}),
		SpoolReports: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "spool_reports", Help: "Reports waiting in the spool (spool depth)."}),
		SpoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "spool_bytes", Help: "Size of the spool file in bytes."}),
		Entries: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "open_windows", Help: "(key, window) counters held in memory by the Reporter (bounded by MaxKeys)."}),
		Unacknowledge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "unreported_windows", Help: "(key, window) counters with usage neither in JetStream nor in the spool."}),
		LateDeltas: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "late_deltas_total", Help: "New (key, window) counters reported under a separate process row because the window's counters may have been freed already (after Retention, or early past MaxKeys)."}),
		CapFlushes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "cap_flushes_total", Help: "Flushes that found MaxKeys (key, window) counters or more held and freed windows early."}),
		FreedEarly: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "windows_freed_early_total", Help: "(key, window) counters freed before their window ended or Retention passed, after their final report was accepted, to stay under MaxKeys."}),
		DurableSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "durable_record_seconds", Help: "Time a refund's or charge's usage took to be acknowledged by JetStream or synced to the spool, before the API answered.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		DurableFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "durable_record_failures_total", Help: "Refunds or charges whose usage could be neither published nor spooled before the answer (answered 503, usage kept in memory)."}),
		StreamFull: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "quota", Subsystem: "ledger",
			Name: "stream_full_total", Help: "Usage messages the stream refused for want of space (kept in the spool; nothing reaches the ledger until it has room)."}),
	}
	if reg != nil {
		reg.MustRegister(m.Published, m.Messages, m.Spooled, m.PublishErr, m.SpoolFull, m.SpoolFullNow,
			m.SpoolReports, m.SpoolBytes, m.Entries, m.Unacknowledge, m.LateDeltas, m.CapFlushes, m.FreedEarly,
			m.DurableSeconds, m.DurableFailures, m.StreamFull)
	}
	return m
}
