package reconcile

import (
	"context"
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

// newStreamFill is the gauge of how full the usage stream is: the
// reconciler's acknowledgements empty a work-queue stream, so it fills
// only while reports are not written (a reconciler down or behind), or
// when the stream keeps what was written (limits retention, see
// ledger.MigrateStream). Once full, limiters' reports are refused.
func newStreamFill() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "reconciler",
		Name: "stream_fill_ratio",
		Help: "Bytes the usage stream holds over its byte limit (0 to 1); at 1 it refuses limiters' reports. Updated at most every 5 s."})
}

// noteFill sets the stream fill gauge from the stream's state, at most
// once per idleCheck (a stream info request each time).
func (r *Reconciler) noteFill(ctx context.Context) {
	now := r.cfg.Clock.Now()
	if !r.filledAt.IsZero() && now.Sub(r.filledAt) < idleCheck {
		return
	}
	r.filledAt = now
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := r.js.Stream(ictx, r.cfg.Stream.Name)
	if err != nil {
		return // the consumer side sees a lost stream
	}
	info := s.CachedInfo()
	if info.Config.MaxBytes > 0 {
		r.m.StreamFill.Set(float64(info.State.Bytes) / float64(info.Config.MaxBytes))
	}
}
