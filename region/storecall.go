package region

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/region/store"
)

// mayCallStoreLocked asks the breaker whether this miss may call the store.
// When the breaker lets it probe, it probes first with a call that writes
// nothing, so that probing a store that is still slow neither loses a lease
// nor resets the bucket's refill clock; the shard is unlocked for the call.
// It returns the limiter time after any call.
func (l *Limiter) mayCallStoreLocked(ctx context.Context, m *miss, now int64) (int64, bool) {
	probe := l.breaker.current() != BreakerClosed
	if probe && l.bgProbes.Load() {
		return now, false // Run probes in the background
	}
	if !l.breaker.allow(now) {
		return now, false
	}
	if !probe {
		return now, true
	}
	m.e.busy = true
	m.sh.mu.Unlock()
	ok := l.probe(ctx, m.key, m.rate(), m.capacity())
	m.sh.mu.Lock()
	m.e.busy = false
	return l.now(), ok
}

// probe makes a store call that writes nothing, and reports whether the
// store answered within the timeout, telling the breaker either way. A
// refusal about the probe's key (store.ErrStoreRejected) is an answer.
func (l *Limiter) probe(ctx context.Context, key string, rate, capacity float64) bool {
	_, lat, err := l.callStore(ctx, store.LeaseRequest{Key: key, Rate: rate, Capacity: capacity, Spread: 1})
	if store.IsTransient(err) || lat > l.cfg.StoreTimeout {
		l.breaker.failure(l.now())
		return false
	}
	l.breaker.success()
	return true
}

// callStore makes one store call under the hard timeout and learns the
// clock offset from its reply (docs/design.md [store-clock]). It counts the
// calls the store refused for their key (store.ErrStoreRejected); telling the
// breaker is the caller's.
func (l *Limiter) callStore(ctx context.Context, req store.LeaseRequest) (store.LeaseReply, time.Duration, error) {
	return l.callStoreWithin(ctx, req, l.cfg.StoreTimeout)
}

// callStoreWithin is callStore under timeout instead of StoreTimeout.
func (l *Limiter) callStoreWithin(ctx context.Context, req store.LeaseRequest, timeout time.Duration) (store.LeaseReply, time.Duration, error) {
	var span trace.Span
	if l.cfg.Tracer != nil {
		ctx, span = l.cfg.Tracer.Start(ctx, "quota.store.call", trace.WithSpanKind(trace.SpanKindClient))
	}
	// An in-process store answers without I/O, so a deadline would only cost the
	// slow path a timer and the request context's cancellation bookkeeping
	// (about 300 B, 6 % of the embedded daemon's allocation per check at
	// 0.5 checks/s per key).
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if !l.inMemory {
		cctx, cancel = context.WithTimeout(ctx, timeout)
	}
	t0 := l.clock.Now()
	rep, err := l.store.Lease(cctx, req)
	t1 := l.clock.Now()
	cancel()
	lat := t1.Sub(t0)
	if span != nil {
		endStoreSpan(span, req, rep, lat, err)
	}
	l.storeCalls.Add(1)
	if l.cfg.Observer != nil {
		l.cfg.Observer.StoreCall(lat, req.Want, rep.Granted, err)
	}
	if err != nil {
		if !store.IsTransient(err) {
			l.keyErrors.Add(1)
		}
		return store.LeaseReply{}, lat, err
	}
	if rep.Granted < 0 || rep.Granted > req.Want {
		return store.LeaseReply{}, lat, fmt.Errorf("%w: store granted %d of %d asked", store.ErrStoreUnavailable, rep.Granted, req.Want)
	}
	mid := l.startWall + int64(t0.Sub(l.start)) + int64(lat)/2
	l.offset.observe(rep.StoreTime.UnixNano() - mid)
	return rep, lat, nil
}

// endStoreSpan records a store call on its span and ends it.
func endStoreSpan(span trace.Span, req store.LeaseRequest, rep store.LeaseReply, lat time.Duration, err error) {
	span.SetAttributes(attribute.Int64("quota.want", req.Want), attribute.Int64("quota.granted", rep.Granted),
		attribute.Int64("quota.return", req.Return), attribute.Int64("quota.latency_us", lat.Microseconds()))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "store call failed")
	}
	span.End()
}

// refusedLocked reports whether the store refused the key's last call for
// a reason of the key's own (store.ErrStoreRejected) less than BreakerCooldown
// ago: until then the key is decided from its degraded bucket without a
// store call, so that a broken key costs one store call per cooldown, not
// one per decision.
func (l *Limiter) refusedLocked(m *miss, now int64) bool {
	b := m.sh.buckets[m.key]
	return b != nil && b.refusing(now, l.cfg.BreakerCooldown)
}
