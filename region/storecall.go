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

// storeOp is what one store call of any capability (leases, quota
// counters, request ids, slots) tells storeCall about itself: its span's
// name, what it asks, and how to read its reply.
type storeOp[R any] struct {
	span    string        // the span's name
	want    int64         // permits or cost asked, for the observer and the span
	timeout time.Duration // 0: Config.StoreTimeout
	// granted is what the reply grants, for the observer and the bound
	// check (0 ≤ granted ≤ want); nil: the call grants nothing.
	granted func(R) int64
	// storeTime is the store's clock in the reply, from which the clock
	// offset is learned (docs/design.md [store-clock]); nil: none.
	storeTime func(R) time.Time
	// detail holds up to two attributes of the call's own for its span,
	// by value: they are copied into the span only when it records, so
	// that a call outside any sampled trace allocates nothing for them.
	detail     [2]attribute.KeyValue
	details    int
	replyAttrs func(R) []attribute.KeyValue // the reply's; nil: none
}

// withDetail returns op with kv among its span's attributes.
func (op storeOp[R]) withDetail(kv attribute.KeyValue) storeOp[R] {
	op.detail[op.details] = kv
	op.details++
	return op
}

// clientSpan is the option every store call's span starts with, made once.
var clientSpan = trace.WithSpanKind(trace.SpanKindClient)

// storeCall makes one store call, do, for every capability alike: under
// the hard timeout (no deadline for an in-process store, which does no
// I/O), timed, counted, observed, traced, bounds-checked, learning the
// clock offset when the reply carries the store's time, and counting a
// refusal about the call (store.ErrStoreRejected) as a key error. Telling
// the breaker is the caller's (tellBreaker, or its own rule): a probe, a
// renewal and a background return judge an answer differently. It is the
// only place that calls the store (TestOneStoreCall).
func storeCall[R any](ctx context.Context, l *Limiter, op storeOp[R], do func(context.Context) (R, error)) (R, time.Duration, error) {
	var span trace.Span
	if l.cfg.Tracer != nil {
		ctx, span = l.cfg.Tracer.Start(ctx, op.span, clientSpan)
	}
	// An in-process store answers without I/O, so a deadline would only cost the
	// slow path a timer and the request context's cancellation bookkeeping
	// (about 300 B, 6 % of the embedded daemon's allocation per check at
	// 0.5 checks/s per key).
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if !l.inMemory {
		timeout := op.timeout
		if timeout == 0 {
			timeout = l.cfg.StoreTimeout
		}
		cctx, cancel = context.WithTimeout(ctx, timeout)
	}
	t0 := l.clock.Now()
	rep, err := do(cctx)
	t1 := l.clock.Now()
	cancel()
	lat := t1.Sub(t0)
	var granted int64
	if err == nil && op.granted != nil {
		granted = op.granted(rep)
		if granted < 0 || granted > op.want {
			err = fmt.Errorf("%w: %s granted %d of %d asked", store.ErrStoreUnavailable, op.span, granted, op.want)
		}
	}
	if span != nil {
		if span.IsRecording() {
			recordStoreSpan(span, op, rep, granted, lat, err)
		}
		span.End()
	}
	l.storeCalls.Add(1)
	if l.cfg.Observer != nil {
		l.cfg.Observer.StoreCall(lat, op.want, granted, err)
	}
	if err != nil {
		if !store.IsTransient(err) {
			l.keyErrors.Add(1)
		}
		var zero R
		return zero, lat, err
	}
	if op.storeTime != nil {
		mid := l.startWall + int64(t0.Sub(l.start)) + int64(lat)/2
		l.offset.observe(op.storeTime(rep).UnixNano() - mid)
	}
	return rep, lat, nil
}

// tellBreaker tells the breaker how a store call went: a transient error
// or an answer later than StoreTimeout is a failure, anything else (a
// refusal about the call included) a success.
func (l *Limiter) tellBreaker(lat time.Duration, err error) {
	if store.IsTransient(err) || lat > l.cfg.StoreTimeout {
		l.breaker.failure(l.now())
		return
	}
	l.breaker.success()
}

// leaseOp is a lease call's storeOp.
func (l *Limiter) leaseOp(req store.LeaseRequest, timeout time.Duration) storeOp[store.LeaseReply] {
	op := storeOp[store.LeaseReply]{span: "quota.store.call", want: req.Want, timeout: timeout,
		granted:   func(r store.LeaseReply) int64 { return r.Granted },
		storeTime: func(r store.LeaseReply) time.Time { return r.StoreTime }}
	return op.withDetail(attribute.Int64("quota.return", req.Return))
}

// callStore makes one lease call under the hard timeout and learns the
// clock offset from its reply (docs/design.md [store-clock]). It counts the
// calls the store refused for their key (store.ErrStoreRejected); telling the
// breaker is the caller's.
func (l *Limiter) callStore(ctx context.Context, req store.LeaseRequest) (store.LeaseReply, time.Duration, error) {
	return l.callStoreWithin(ctx, req, l.cfg.StoreTimeout)
}

// callStoreWithin is callStore under timeout instead of StoreTimeout.
func (l *Limiter) callStoreWithin(ctx context.Context, req store.LeaseRequest, timeout time.Duration) (store.LeaseReply, time.Duration, error) {
	return storeCall(ctx, l, l.leaseOp(req, timeout), func(ctx context.Context) (store.LeaseReply, error) {
		return l.store.Lease(ctx, req)
	})
}

// recordStoreSpan records a store call on its span, which records.
func recordStoreSpan[R any](span trace.Span, op storeOp[R], rep R, granted int64, lat time.Duration, err error) {
	kv := make([]attribute.KeyValue, 0, 6)
	kv = append(kv, attribute.Int64("quota.want", op.want), attribute.Int64("quota.granted", granted),
		attribute.Int64("quota.latency_us", lat.Microseconds()))
	kv = append(kv, op.detail[:op.details]...)
	if op.replyAttrs != nil {
		kv = append(kv, op.replyAttrs(rep)...)
	}
	span.SetAttributes(kv...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "store call failed")
	}
}
