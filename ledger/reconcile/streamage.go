package reconcile

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// newOldestUnwritten is the gauge of the oldest report waiting for the
// reconciler: the usage stream keeps reports until they are written (no
// age limit, ledger.StreamConfig.MaxAge), so a reconciler that falls
// behind shows here hours before the stream's byte limit refuses
// publishers.
func newOldestUnwritten() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "reconciler",
		Name: "oldest_unwritten_report_timestamp_seconds",
		Help: "Unix time the oldest usage message this reconciler has received and not yet written was published to the stream (its batch's oldest while the batch is written or retried); 0 when nothing waits. Alert on time() minus it."})
}

// noteOldest sets the gauge to the publish time of the oldest of msgs, the
// batch about to be written: the consumer delivers in stream order, so
// every older message was written (or redelivered within msgs).
func (r *Reconciler) noteOldest(msgs []gathered) {
	var oldest time.Time
	for _, g := range msgs {
		md, err := g.m.Metadata()
		if err != nil {
			continue
		}
		if oldest.IsZero() || md.Timestamp.Before(oldest) {
			oldest = md.Timestamp
		}
	}
	if !oldest.IsZero() {
		r.m.OldestUnwritten.Set(float64(oldest.UnixNano()) / 1e9)
	}
}

// noteCaughtUp clears the gauge when the consumer has nothing pending or
// unacknowledged.
func (r *Reconciler) noteCaughtUp(info *jetstream.ConsumerInfo) {
	if info.NumPending == 0 && info.NumAckPending == 0 {
		r.m.OldestUnwritten.Set(0)
	}
}
