package region

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// Slot is the answer to Acquire. A refusal is a Slot with Allowed false,
// never an error.
type Slot struct {
	// Allowed reports that the caller holds the slot until Expires, or
	// until it calls Release.
	Allowed bool
	// ID is the slot's lease id: pass it to Release, or to Acquire to
	// renew the slot before it expires.
	ID string
	// Expires is how long the slot lives unless renewed (Config.SlotTTL).
	Expires time.Duration
	// Limit is the plan's concurrency; Held the key's slots held in the
	// region after this call (in this process alone when Degraded).
	Limit, Held int
	// RetryAfter is a suggested wait before trying again, when not
	// Allowed: a tenth of SlotTTL (slots free when their holders finish,
	// which nobody can predict), or the breaker's next probe when the
	// store is unavailable.
	RetryAfter time.Duration
	// Degraded reports that the store was unavailable and the plan's
	// failure policy decided (FailurePolicy).
	Degraded bool
	// FailurePolicy is the policy that decided when Degraded, else "".
	FailurePolicy FailurePolicy
}

// slots is the concurrency capability (Plan.Concurrency): slots taken
// from the store for SlotTTL, and, while the store is unavailable, the
// slots FailDegraded grants in this process. It owns the slot-store part
// of the store contract and those local slots.
type slots struct {
	l     *Limiter
	store store.SlotStore // nil: the store holds no slots (ErrNoConcurrency)
	local localSlots      // slots granted under FailDegraded while the store was unavailable
}

// sweep forgets the local slots expired by limiter time now.
func (ss *slots) sweep(now int64) { ss.local.sweep(now) }

// Acquire takes a concurrency slot of key's plan (Plan.Concurrency) in
// this region for Config.SlotTTL, or, when id is a lease id from an earlier
// Acquire that still holds its slot, renews it; id "" asks for a new slot.
// It makes one store call. While the store is unavailable the plan's
// failure policy decides (docs/design.md [plan-semantics]): FailClosed
// refuses, FailOpen allows, FailDegraded allows up to Concurrency ÷
// processes slots held in this process (rounded up). An error means bad
// input or a key without a concurrency limit (ErrNoConcurrency).
func (l *Limiter) Acquire(ctx context.Context, key, id string) (Slot, error) {
	return l.slots.acquire(ctx, key, id)
}

// acquire implements Limiter.Acquire.
func (ss *slots) acquire(ctx context.Context, key, id string) (Slot, error) {
	plan, err := ss.plan(key, id, true)
	if err != nil {
		return Slot{}, err
	}
	if id == "" {
		id = newLeaseID()
	}
	if ss.store == nil {
		return Slot{}, fmt.Errorf("%w: the store holds no slots", ErrNoConcurrency)
	}
	s := Slot{ID: id, Limit: plan.Concurrency}
	if ss.storeUsable() {
		req := store.SlotRequest{Key: key, ID: id, Limit: plan.Concurrency, TTL: ss.l.cfg.SlotTTL}
		rep, _, err := storeCall(ctx, &ss.l.calls, storeOp[store.SlotReply]{span: "quota.store.acquire", verdict: judgeAnswer}, func(ctx context.Context) (store.SlotReply, error) {
			return ss.store.AcquireSlot(ctx, req)
		})
		if err == nil {
			s.Allowed, s.Held, s.Expires = rep.Acquired, rep.Held, rep.TTL
			if !s.Allowed {
				s.RetryAfter = max(ss.l.cfg.SlotTTL/10, time.Millisecond)
			}
			return s, nil
		}
	}
	return ss.degraded(key, plan, s), nil
}

// Release frees the slot id of key, and reports whether it held one (a
// slot that expired, or was never taken, did not). A slot taken or renewed
// while the store was unavailable is freed in this process, and in the
// store too when it can be reached. When the store cannot be reached for
// a slot this process does not hold, the error wraps store.ErrStoreUnavailable:
// the slot frees itself when it expires.
func (l *Limiter) Release(ctx context.Context, key, id string) (bool, error) {
	return l.slots.release(ctx, key, id)
}

// release implements Limiter.Release.
func (ss *slots) release(ctx context.Context, key, id string) (bool, error) {
	if _, err := ss.plan(key, id, false); err != nil {
		return false, err
	}
	local := ss.local.release(key, id)
	if ss.store == nil {
		return false, fmt.Errorf("%w: the store holds no slots", ErrNoConcurrency)
	}
	err := fmt.Errorf("the breaker is open")
	var held bool
	if ss.storeUsable() {
		held, _, err = storeCall(ctx, &ss.l.calls, storeOp[bool]{span: "quota.store.release", verdict: judgeAnswer}, func(ctx context.Context) (bool, error) {
			return ss.store.ReleaseSlot(ctx, key, id)
		})
	}
	switch {
	case err == nil:
		return held || local, nil
	case local:
		return true, nil
	}
	return false, fmt.Errorf("%w: release of %q: %w", store.ErrStoreUnavailable, key, err)
}

// plan checks key and id and resolves key's plan, which must have a
// concurrency limit when acquiring. An empty id is allowed only when
// acquiring.
func (ss *slots) plan(key, id string, acquiring bool) (Plan, error) {
	if err := CheckKey(key); err != nil {
		return Plan{}, err
	}
	if id != "" || !acquiring {
		if err := checkLeaseID(id); err != nil {
			return Plan{}, err
		}
	}
	plan, err := ss.l.plans.resolve(key)
	if err != nil {
		return Plan{}, err
	}
	if acquiring && plan.Concurrency == 0 {
		return Plan{}, fmt.Errorf("%w: key %q's plan %q has no concurrency limit", ErrNoConcurrency, key, plan.Name)
	}
	return plan, nil
}

// storeUsable reports whether a slot call may try the store: the
// breaker is closed, or it lets this call probe (when Run does not probe
// in the background).
func (ss *slots) storeUsable() bool {
	if ss.l.breaker.current() == BreakerClosed {
		return true
	}
	return !ss.l.calls.inBackground() && ss.l.breaker.allow(ss.l.now())
}

// degraded decides an Acquire the store could not, by the plan's
// failure policy.
func (ss *slots) degraded(key string, plan Plan, s Slot) Slot {
	s.Degraded, s.FailurePolicy = true, plan.Policy()
	switch s.FailurePolicy {
	case FailOpen:
		s.Allowed, s.Expires = true, ss.l.cfg.SlotTTL
	case FailClosed:
		s.RetryAfter = max(ss.l.breaker.untilProbe(ss.l.now()), time.Millisecond)
	default:
		limit := (plan.Concurrency + ss.l.leases.processes() - 1) / ss.l.leases.processes()
		s.Allowed, s.Held = ss.local.acquire(key, s.ID, limit, ss.l.now(), ss.l.cfg.SlotTTL)
		if s.Allowed {
			s.Expires = ss.l.cfg.SlotTTL
		} else {
			s.RetryAfter = max(ss.l.cfg.SlotTTL/10, time.Millisecond)
		}
	}
	return s
}

// newLeaseID returns 128 random bits in hex.
func newLeaseID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// localSlots holds the slots this process granted under FailDegraded
// while the store was unavailable, until released or expired (Run's sweep
// forgets expired ones). The store never hears of them.
type localSlots struct {
	mu    sync.Mutex
	slots map[string]map[string]int64 // key → lease id → expiry (limiter ns); guarded by mu
}

// acquire takes or renews id's slot of key when fewer than limit are
// held, and returns the slots held after it.
func (s *localSlots) acquire(key, id string, limit int, now int64, ttl time.Duration) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil {
		s.slots = make(map[string]map[string]int64)
	}
	held := s.slots[key]
	for k, exp := range held {
		if exp <= now {
			delete(held, k)
		}
	}
	if _, ok := held[id]; !ok && len(held) >= limit {
		return false, len(held)
	}
	if held == nil {
		held = make(map[string]int64)
		s.slots[key] = held
	}
	held[id] = now + int64(ttl)
	return true, len(held)
}

// release frees id's slot of key and reports whether this process held it.
func (s *localSlots) release(key, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.slots[key]
	if _, ok := held[id]; !ok {
		return false
	}
	delete(held, id)
	if len(held) == 0 {
		delete(s.slots, key)
	}
	return true
}

// sweep forgets the expired slots, and the keys left without any.
func (s *localSlots) sweep(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, held := range s.slots {
		for id, exp := range held {
			if exp <= now {
				delete(held, id)
			}
		}
		if len(held) == 0 {
			delete(s.slots, key)
		}
	}
}
