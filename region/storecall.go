package region

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/region/store"
)

// storeClient makes the Limiter's store calls: one generic call for every
// capability (storeCall) and the lease calls, probes and breaker verdicts
// around them. It owns the call counters and the background probes; the
// capabilities hold their own parts of the store contract and pass their
// calls through it.
type storeClient struct {
	l *Limiter
	// inMemory is set when the store answers without I/O (inProcess):
	// its calls get no deadline.
	inMemory   bool
	storeCalls atomic.Int64
	keyErrors  atomic.Int64 // store calls refused for their key's own reason (store.ErrStoreRejected)
	// bgProbes is set while Run probes an open breaker in the background
	// (Config.Clock nil): misses then never probe themselves.
	bgProbes  atomic.Bool
	inflight  atomic.Int32   // background probes in flight
	lastProbe atomic.Int64   // limiter ns the last background probe started
	probes    sync.WaitGroup // background probes in flight, for Run to wait on
}

// init makes the client l's; inMemory: the store answers without I/O.
func (sc *storeClient) init(l *Limiter, inMemory bool) { sc.l, sc.inMemory = l, inMemory }

// inBackground reports whether Run probes the breaker in the background.
func (sc *storeClient) inBackground() bool { return sc.bgProbes.Load() }

// runProbes makes Run the breaker's prober until the returned stop is
// called, which waits for the probes in flight.
func (sc *storeClient) runProbes() (stop func()) {
	sc.bgProbes.Store(true)
	return func() {
		sc.bgProbes.Store(false)
		sc.probes.Wait()
	}
}

// keyError counts a call refused for its key's own reason that was never
// sent (a capability the store lacks).
func (sc *storeClient) keyError() { sc.keyErrors.Add(1) }

// stats adds the client's counters to s.
func (sc *storeClient) stats(s *Stats) {
	s.StoreCalls = sc.storeCalls.Load()
	s.KeyErrors = sc.keyErrors.Load()
}

// mayCallLocked asks the breaker whether this miss may call the store.
// When the breaker lets it probe, it probes first with a call that writes
// nothing, so that probing a store that is still slow neither loses a lease
// nor resets the bucket's refill clock; the shard is unlocked for the call.
// It returns the limiter time after any call.
func (sc *storeClient) mayCallLocked(ctx context.Context, m *miss, now int64) (int64, bool) {
	probe := sc.l.breaker.current() != BreakerClosed
	if probe && sc.bgProbes.Load() {
		return now, false // Run probes in the background
	}
	if !sc.l.breaker.allow(now) {
		return now, false
	}
	if !probe {
		return now, true
	}
	m.e.busy = true
	m.sh.mu.Unlock()
	ok := sc.probe(ctx, m.key, m.rate(), m.capacity())
	m.sh.mu.Lock()
	m.e.busy = false
	return sc.l.now(), ok
}

// probe makes a store call that writes nothing, and reports whether the
// store answered within the timeout, telling the breaker either way. A
// refusal about the probe's key (store.ErrStoreRejected) is an answer.
func (sc *storeClient) probe(ctx context.Context, key string, rate, capacity float64) bool {
	_, lat, err := sc.lease(ctx, store.LeaseRequest{Key: key, Rate: rate, Capacity: capacity, Spread: 1}, judgeAnswer)
	return !store.IsTransient(err) && lat <= sc.l.cfg.StoreTimeout
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
	// verdict is how the call tells the breaker how it went.
	verdict verdict
}

// verdict is a store call's rule for telling the breaker how it went.
type verdict uint8

const (
	// judgeAnswer: a transient error or an answer later than StoreTimeout
	// is a failure, anything else (a refusal about the call included) a
	// success. Decisions, probes and capability calls judge so.
	judgeAnswer verdict = iota
	// judgeReach: only a transient error is a failure. Returns judge so:
	// they are sent off the decision path, where a late answer costs
	// nothing.
	judgeReach
	// judgeNone: the caller tells the breaker (a background probe).
	judgeNone
)

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
// refusal about the call (store.ErrStoreRejected) as a key error, and
// telling the breaker by op.verdict. It is the only place that calls the
// store (TestOneStoreCall).
func storeCall[R any](ctx context.Context, sc *storeClient, op storeOp[R], do func(context.Context) (R, error)) (R, time.Duration, error) {
	var span trace.Span
	if sc.l.cfg.Tracer != nil {
		ctx, span = sc.l.cfg.Tracer.Start(ctx, op.span, clientSpan)
	}
	// An in-process store answers without I/O, so a deadline would only cost the
	// slow path a timer and the request context's cancellation bookkeeping
	// (about 300 B, 6 % of the embedded daemon's allocation per check at
	// 0.5 checks/s per key).
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if !sc.l.calls.inMemory {
		timeout := op.timeout
		if timeout == 0 {
			timeout = sc.l.cfg.StoreTimeout
		}
		cctx, cancel = context.WithTimeout(ctx, timeout)
	}
	t0 := sc.l.clock.Now()
	rep, err := do(cctx)
	t1 := sc.l.clock.Now()
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
	sc.storeCalls.Add(1)
	if sc.l.cfg.Observer != nil {
		sc.l.cfg.Observer.StoreCall(lat, op.want, granted, err)
	}
	switch {
	case op.verdict == judgeNone:
	case store.IsTransient(err) || op.verdict == judgeAnswer && lat > sc.l.cfg.StoreTimeout:
		sc.l.breaker.failure(sc.l.now())
	default:
		sc.l.breaker.success()
	}
	if err != nil {
		if !store.IsTransient(err) {
			sc.keyErrors.Add(1)
		}
		var zero R
		return zero, lat, err
	}
	if op.storeTime != nil {
		mid := sc.l.startWall + int64(t0.Sub(sc.l.start)) + int64(lat)/2
		sc.l.offset.observe(op.storeTime(rep).UnixNano() - mid)
	}
	return rep, lat, nil
}

// leaseOp is a lease call's storeOp.
func (sc *storeClient) leaseOp(req store.LeaseRequest, timeout time.Duration, v verdict) storeOp[store.LeaseReply] {
	op := storeOp[store.LeaseReply]{span: "quota.store.call", want: req.Want, timeout: timeout, verdict: v,
		granted:   func(r store.LeaseReply) int64 { return r.Granted },
		storeTime: func(r store.LeaseReply) time.Time { return r.StoreTime }}
	return op.withDetail(attribute.Int64("quota.return", req.Return))
}

// lease makes one lease call (storeCall) under StoreTimeout, telling the
// breaker by v.
func (sc *storeClient) lease(ctx context.Context, req store.LeaseRequest, v verdict) (store.LeaseReply, time.Duration, error) {
	return sc.leaseWithin(ctx, req, sc.l.cfg.StoreTimeout, v)
}

// leaseWithin is storeClient.lease under timeout instead of StoreTimeout.
func (sc *storeClient) leaseWithin(ctx context.Context, req store.LeaseRequest, timeout time.Duration, v verdict) (store.LeaseReply, time.Duration, error) {
	return storeCall(ctx, sc, sc.leaseOp(req, timeout, v), func(ctx context.Context) (store.LeaseReply, error) {
		return sc.l.store.Lease(ctx, req)
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

// probeInBackground starts a probe every BreakerCooldown while the breaker
// is not closed, up to maxProbes at once: a probe whose connection hangs
// on a store that is still away (a proxy that accepts and then waits) does
// not hold up the next. A probe's first call may take ProbeTimeout: after
// a store restart the client dials anew and the store reloads its script,
// which a decision must not wait for and which alone may exceed
// StoreTimeout. Its second call is the test: the breaker closes only when
// the store answers that within StoreTimeout, so a store that is up but
// slow stays bypassed. Both calls only read.
func (sc *storeClient) probeInBackground(ctx context.Context) {
	if sc.l.breaker.current() == BreakerClosed || sc.inflight.Load() >= maxProbes {
		return
	}
	now := sc.l.now()
	last := sc.lastProbe.Load()
	if last != 0 && time.Duration(now-last) < sc.l.cfg.BreakerCooldown || !sc.lastProbe.CompareAndSwap(last, now) {
		return
	}
	sc.inflight.Add(1)
	sc.probes.Add(1)
	go func() {
		defer sc.probes.Done()
		defer sc.inflight.Add(-1)
		req := store.LeaseRequest{Key: probeKey, Rate: 1, Capacity: 1, Spread: 1}
		_, _, err := sc.leaseWithin(ctx, req, max(sc.l.cfg.ProbeTimeout, sc.l.cfg.StoreTimeout), judgeNone)
		var lat time.Duration
		if !store.IsTransient(err) {
			_, lat, err = sc.lease(ctx, req, judgeNone)
		}
		switch {
		case !store.IsTransient(err) && lat <= sc.l.cfg.StoreTimeout:
			sc.l.breaker.success()
		case sc.l.breaker.current() != BreakerClosed:
			// A probe that failed after another closed the breaker says
			// nothing about the store now.
			sc.l.breaker.failure(sc.l.now())
		}
	}()
}
