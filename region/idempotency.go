package region

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/quotaplatform/quota/region/store"
)

// Adjustment is the answer to Refund and Charge.
type Adjustment struct {
	// Replayed: the request id was refunded (or charged) before with the
	// same cost, and nothing changed now.
	Replayed bool
	// Cost is the cost applied: now, or the first time when Replayed.
	Cost int64
	// Charged and Refunded are the request id's totals after the call.
	Charged, Refunded int64
	// Remaining is the region's bucket after the call; negative when a
	// post-hoc charge put it in debt.
	Remaining int64
	// Limit is the plan's capacity.
	Limit int64
}

// idempotency is the request-id capability (docs/design.md
// [idempotency]): checks, refunds and charges that the store records by
// id, and the horizon it keeps them. It owns the request-store part of the
// store contract; the lease engine's state (entries, quotas) it reaches
// through the Limiter's methods.
type idempotency struct {
	l     *Limiter
	store store.RequestStore // nil: the store records no ids (ErrNoIdempotency)
	// horizon is Config.IdempotencyHorizon, or what SetIdempotencyHorizon
	// set since, in nanoseconds.
	horizon atomic.Int64
}

// init makes the capability l's, calling st (nil: none) with horizon.
func (im *idempotency) init(l *Limiter, st store.RequestStore, horizon time.Duration) {
	im.l, im.store = l, st
	im.horizon.Store(int64(horizon))
}

// AllowRequest is Allow for a check that carries a request id
// (docs/design.md [idempotency]): the first check of (key, id) within
// Config.IdempotencyHorizon is decided and charged by one store call that
// records its decision; a later one, on any process of the region, gets
// that decision with Replayed set and charges nothing. It always calls the
// store: a check with an id is never decided from the local lease. While
// the store is unavailable (breaker not closed, or the call fails) the
// check is decided by the plan's failure policy like any check, flagged
// Degraded, and its id is not recorded: a retry is charged again. id ""
// is Allow.
func (l *Limiter) AllowRequest(ctx context.Context, key string, cost int64, id string) (Decision, error) {
	return l.idem.allow(ctx, key, cost, id)
}

// allow implements Limiter.AllowRequest.
func (im *idempotency) allow(ctx context.Context, key string, cost int64, id string) (Decision, error) {
	if id == "" {
		return im.l.Allow(ctx, key, cost)
	}
	if err := CheckKey(key); err != nil {
		return Decision{}, err
	}
	if cost <= 0 {
		return Decision{}, fmt.Errorf("%w: cost must be positive, got %d", ErrInvalidCost, cost)
	}
	if err := CheckRequestID(id); err != nil {
		return Decision{}, err
	}
	if im.store == nil {
		return Decision{}, fmt.Errorf("%w: %T", ErrNoIdempotency, im.l.store)
	}
	h := maphash.String(im.l.seed, key)
	m, err := im.l.leases.newMiss(key, h, cost)
	if err != nil {
		return Decision{}, err
	}
	sh := m.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := im.l.now()
	im.l.leases.attachLocked(&m)
	if im.l.breaker.current() != BreakerClosed {
		return im.l.degraded.decideLocked(&m, now), nil
	}
	// A key whose quota is spent still asks the store, with Deny: a known
	// id replays its first decision, a new one is recorded as rejected.
	var d Decision
	var quotaBack *quotaReturn // the quota cost to give back if the check is not charged
	deny := false
	if m.q.spent(now) {
		deny = true
	} else if m.plan.HasQuotas() {
		switch took, back := im.l.quotas.requestLocked(ctx, &m, now); took {
		case quotaUnavailable:
			return im.l.degraded.decideLocked(&m, im.l.now()), nil
		case quotaSpent:
			deny = true
		default:
			quotaBack = back
		}
	}
	call := store.RequestCall{Op: store.RequestCheck, Deny: deny, Key: key, ID: id, Rate: m.rate(), Capacity: m.capacity(),
		Cost: cost, Horizon: im.currentHorizon(), Grace: im.l.cfg.DebtGrace}
	sh.mu.Unlock()
	rep, err := im.call(ctx, call)
	sh.mu.Lock()
	now = im.l.now()
	im.l.leases.attachLocked(&m) // the entry may have been evicted meanwhile
	if quotaBack != nil && (err != nil || !rep.Allowed || rep.Status == store.RequestReplayed) {
		// Not charged now: the quota cost goes back with the next sweep.
		sh.returns = append(sh.returns, pendingReturn{key: key, quota: quotaBack})
	}
	if err != nil {
		return im.l.degraded.decideLocked(&m, now), nil
	}
	e := m.e
	im.l.rollLocked(sh, key, e, now)
	e.referenced = true
	d = Decision{Allowed: rep.Allowed, Limit: e.limit(), plan: e.plan, Path: PathSlow, Replayed: rep.Status == store.RequestReplayed}
	tokens := rep.Tokens
	d.Remaining = max(0, int64(tokens))
	d.Reset = refillTime(m.capacity()-tokens, m.rate())
	if !rep.Allowed {
		d.RetryAfter = retryAfter(float64(cost)-tokens, m.rate())
	}
	if d.Replayed {
		if !d.Allowed && e.plan.Shadow {
			d.Allowed, d.ShadowRejected, d.RetryAfter = true, true, 0
		}
		return d, nil
	}
	sh.makeRoomLocked(key, e, cost, im.l.cfg.Window)
	e.addDemand(cost)
	if rep.Allowed {
		// Taken from the store for this check alone: leased and spent.
		e.leased += cost
		e.spent += cost
		sh.allowed++
		if e.quota {
			im.l.quotas.decisionLocked(sh, key, e, now, &d)
		}
		return d, nil
	}
	refuseLocked(sh, e, cost, &d)
	if e.quota {
		im.l.quotas.decisionLocked(sh, key, e, now, &d)
	}
	return d, nil
}

// Refund gives cost back to key's bucket for the request id (a request
// that failed upstream), at most what the id was charged (its allowed
// check plus its post-hoc charge), once: the same refund sent again is
// Replayed and changes nothing. The ledger counts it as Usage.Refunded.
// It needs the store: while the store is unavailable it fails with an
// error wrapping store.ErrStoreUnavailable, to be retried. An id the region
// holds no record of is ErrUnknownRequest, a refund above the charge
// ErrRefundExceedsCharge, another refund of the same id with another cost
// ErrRequestConflict.
func (l *Limiter) Refund(ctx context.Context, key string, cost int64, id string) (Adjustment, error) {
	return l.idem.adjust(ctx, store.RequestRefund, key, cost, id)
}

// Charge takes cost from key's bucket after the fact (usage known only
// once a request was served), without a decision: the bucket may go into
// debt, down to −capacity, and the region's checks of the key are
// rejected until its refill repays it. It is applied once per request id
// (the same charge sent again is Replayed; another cost is
// ErrRequestConflict), counted as Usage.Charged, and needs the store as
// Refund does. This process's lease of the key ends, so that its next
// check sees the debt.
func (l *Limiter) Charge(ctx context.Context, key string, cost int64, id string) (Adjustment, error) {
	return l.idem.adjust(ctx, store.RequestCharge, key, cost, id)
}

func (im *idempotency) adjust(ctx context.Context, op store.RequestOp, key string, cost int64, id string) (Adjustment, error) {
	if err := CheckKey(key); err != nil {
		return Adjustment{}, err
	}
	if cost <= 0 || cost > MaxCapacity {
		return Adjustment{}, fmt.Errorf("%w: cost must be in [1, %d], got %d", ErrInvalidCost, int64(MaxCapacity), cost)
	}
	if id == "" {
		return Adjustment{}, fmt.Errorf("%w: request_id is required: the id of the request to %s", ErrInvalidRequestID, op)
	}
	if err := CheckRequestID(id); err != nil {
		return Adjustment{}, err
	}
	if im.store == nil {
		return Adjustment{}, fmt.Errorf("%w: %T", ErrNoIdempotency, im.l.store)
	}
	plan, err := im.l.plans.resolve(key)
	if err != nil {
		return Adjustment{}, err
	}
	if im.l.breaker.current() != BreakerClosed {
		return Adjustment{}, fmt.Errorf("%w: the regional store is unavailable; %s not applied, send it again", store.ErrStoreUnavailable, op)
	}
	share := im.l.leases.share(key)
	call := store.RequestCall{Op: op, Key: key, ID: id, Rate: plan.Rate * share, Capacity: plan.Capacity * share,
		Cost: cost, Horizon: im.currentHorizon(), Grace: im.l.cfg.DebtGrace}
	rep, err := im.call(ctx, call)
	if err != nil {
		if store.IsTransient(err) {
			return Adjustment{}, fmt.Errorf("%s not applied, send it again: %w", op, err)
		}
		return Adjustment{}, err
	}
	a := Adjustment{Replayed: rep.Status == store.RequestReplayed, Cost: rep.Cost, Charged: rep.Charged,
		Refunded: rep.Refunded, Remaining: int64(rep.Tokens), Limit: int64(plan.Capacity)}
	switch rep.Status {
	case store.RequestUnknown:
		return Adjustment{}, fmt.Errorf("%w: request_id %q of key %q was not charged in this region within the idempotency horizon (%v)",
			ErrUnknownRequest, id, key, im.currentHorizon())
	case store.RequestOverRefund:
		return Adjustment{}, fmt.Errorf("%w: cost %d is more than request_id %q was charged (%d, %d of it refunded)",
			ErrRefundExceedsCharge, cost, id, rep.Charged, rep.Refunded)
	case store.RequestConflict:
		return Adjustment{}, fmt.Errorf("%w: request_id %q was %s with cost %d, not %d", ErrRequestConflict, id, pastTense(op), rep.Cost, cost)
	}
	h := maphash.String(im.l.seed, key)
	sh := im.l.shardOf(h)
	now := im.l.now()
	u := Usage{Key: key, WindowStart: WindowStart(key, time.Unix(0, im.l.storeNanos(now)), im.l.cfg.Window)}
	durable, _ := im.l.cfg.Usage.(DurableUsageSink)
	if rep.Status == store.RequestReplayed {
		if durable == nil {
			return a, nil
		}
		// The first answer may have failed to make the adjustment durable
		// (ErrUsageNotDurable): the retry that replays it confirms it. The
		// adjustment was applied in this window or, for a prompt retry,
		// the one before; zero deltas only name them.
		prev := Usage{Key: key, WindowStart: u.WindowStart.Add(-im.l.cfg.Window)}
		if err := durable.RecordDurable(ctx, []Usage{prev, u}); err != nil {
			return Adjustment{}, notDurable(op, err)
		}
		return a, nil
	}
	sh.mu.Lock()
	if plan.HasQuotas() {
		sh.returns = append(sh.returns, im.l.quotas.adjustment(key, plan, share, op, cost, now))
	}
	if op == store.RequestRefund {
		u.Refunded = cost
	} else {
		u.Charged = cost
		if e := sh.keys[key]; e != nil {
			e.leaseLive = false // the next check goes to the store and sees the debt
		}
	}
	if durable == nil {
		sh.pending = append(sh.pending, u)
		sh.mu.Unlock()
		return a, nil
	}
	sh.mu.Unlock()
	// Durable before the answer (docs/design.md [idempotency]): the store
	// applied the adjustment, and a retry of a lost answer replays it and
	// records nothing, so the ledger must hold it before anyone hears
	// that it was applied. Outside the shard lock: this waits for
	// JetStream or an fsync.
	if err := durable.RecordDurable(ctx, []Usage{u}); err != nil {
		return Adjustment{}, notDurable(op, err)
	}
	return a, nil
}

// DurableUsageSink is a UsageSink that can make usage durable before it
// returns. Refund and Charge use it when Config.Usage implements it: the
// adjustment is answered only once it is durable, so that a process that
// dies right after the answer loses nothing the store applied (a retry of
// the same request id replays and records nothing). Allow never calls it.
type DurableUsageSink interface {
	UsageSink
	// RecordDurable adds batch as Record does (zero deltas add nothing),
	// and returns once this process's cumulative usage of every (key,
	// window) named in batch is durable for the ledger, or with an error
	// saying it is not: the deltas are then held in memory as Record's
	// are, and reported with the next flush. It may block on I/O up to
	// ctx's end or the sink's own timeout. Safe for concurrent use.
	RecordDurable(ctx context.Context, batch []Usage) error
}

// ErrUsageNotDurable: a refund or charge was applied to the store, but its
// usage could not be made durable for the ledger (Config.Usage is a
// DurableUsageSink that failed): it is held in this process's memory.
// Send the same request again: it replays, and confirms the usage once it
// is durable. Wrapped with store.ErrStoreUnavailable, so that APIs answer it as
// a retryable unavailability (HTTP 503).
var ErrUsageNotDurable = errors.New("usage not yet durable for the ledger")

func notDurable(op store.RequestOp, err error) error {
	return fmt.Errorf("%w: %w: %s applied, but not yet recorded for the ledger; send it again to confirm: %w",
		store.ErrStoreUnavailable, ErrUsageNotDurable, op, err)
}

// IdempotencyHorizon is how long the region's store remembers a request
// id after its last use: Config.IdempotencyHorizon, or what
// SetIdempotencyHorizon set since.
func (l *Limiter) IdempotencyHorizon() time.Duration {
	return l.idem.currentHorizon()
}

// currentHorizon implements Limiter.IdempotencyHorizon.
func (im *idempotency) currentHorizon() time.Duration { return time.Duration(im.horizon.Load()) }

// SetIdempotencyHorizon changes the idempotency horizon of the calls that
// follow (at least 1 ms), for a process whose Limiter was configured by a
// package that does not set Config.IdempotencyHorizon (the daemon's
// --idempotency-horizon). Records already written keep their expiry.
func (l *Limiter) SetIdempotencyHorizon(d time.Duration) error {
	return l.idem.setHorizon(d)
}

// setHorizon implements Limiter.SetIdempotencyHorizon.
func (im *idempotency) setHorizon(d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("region: idempotency horizon must be at least 1ms, got %v", d)
	}
	im.horizon.Store(int64(d))
	return nil
}

func pastTense(op store.RequestOp) string {
	if op == store.RequestRefund {
		return "refunded"
	}
	return "charged"
}

// call makes one request id call (storeCall) and tells the
// breaker how it went (a refusal about the call is an answer).
func (im *idempotency) call(ctx context.Context, call store.RequestCall) (store.RequestReply, error) {
	op := storeOp[store.RequestReply]{span: "quota.store.request", want: call.Cost,
		granted:   requestGranted,
		storeTime: func(r store.RequestReply) time.Time { return r.StoreTime },
		replyAttrs: func(r store.RequestReply) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.Int("quota.status", int(r.Status))}
		}}
	if call.Op == store.RequestCheck {
		op.granted = checkGranted
	}
	op = op.withDetail(attribute.String("quota.op", call.Op.String()))
	rep, _, err := storeCall(ctx, &im.l.calls, op, func(ctx context.Context) (store.RequestReply, error) {
		return im.store.Request(ctx, call)
	})
	return rep, err
}

// checkGranted is what a check's reply granted, for the observer: its
// cost when applied and allowed. requestGranted is a refund's or a
// charge's: its cost when applied.
func checkGranted(r store.RequestReply) int64 {
	if r.Status == store.RequestApplied && r.Allowed {
		return r.Cost
	}
	return 0
}

func requestGranted(r store.RequestReply) int64 {
	if r.Status == store.RequestApplied {
		return r.Cost
	}
	return 0
}
