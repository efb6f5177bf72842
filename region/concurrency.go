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

// Acquire takes a concurrency slot of key's plan (Plan.Concurrency) in
// this region for Config.SlotTTL, or, when id is a lease id from an earlier
// Acquire that still holds its slot, renews it; id "" asks for a new slot.
// It makes one store call. While the store is unavailable the plan's
// failure policy decides (docs/design.md [plan-semantics]): FailClosed
// refuses, FailOpen allows, FailDegraded allows up to Concurrency ÷
// processes slots held in this process (rounded up). An error means bad
// input or a key without a concurrency limit (ErrNoConcurrency).
func (l *Limiter) Acquire(ctx context.Context, key, id string) (Slot, error) {
	plan, err := l.slotPlan(key, id, true)
	if err != nil {
		return Slot{}, err
	}
	if id == "" {
		id = newLeaseID()
	}
	if l.slotStore == nil {
		return Slot{}, fmt.Errorf("%w: the store holds no slots", ErrNoConcurrency)
	}
	s := Slot{ID: id, Limit: plan.Concurrency}
	if l.slotStoreUsable() {
		req := store.SlotRequest{Key: key, ID: id, Limit: plan.Concurrency, TTL: l.cfg.SlotTTL}
		rep, lat, err := storeCall(ctx, l, storeOp[store.SlotReply]{span: "quota.store.acquire"}, func(ctx context.Context) (store.SlotReply, error) {
			return l.slotStore.AcquireSlot(ctx, req)
		})
		l.tellBreaker(lat, err)
		if err == nil {
			s.Allowed, s.Held, s.Expires = rep.Acquired, rep.Held, rep.TTL
			if !s.Allowed {
				s.RetryAfter = max(l.cfg.SlotTTL/10, time.Millisecond)
			}
			return s, nil
		}
	}
	return l.degradedSlot(key, plan, s), nil
}

// Release frees the slot id of key, and reports whether it held one (a
// slot that expired, or was never taken, did not). A slot taken or renewed
// while the store was unavailable is freed in this process, and in the
// store too when it can be reached. When the store cannot be reached for
// a slot this process does not hold, the error wraps store.ErrStoreUnavailable:
// the slot frees itself when it expires.
func (l *Limiter) Release(ctx context.Context, key, id string) (bool, error) {
	if _, err := l.slotPlan(key, id, false); err != nil {
		return false, err
	}
	local := l.local.release(key, id)
	if l.slotStore == nil {
		return false, fmt.Errorf("%w: the store holds no slots", ErrNoConcurrency)
	}
	err := fmt.Errorf("the breaker is open")
	var held bool
	if l.slotStoreUsable() {
		var lat time.Duration
		held, lat, err = storeCall(ctx, l, storeOp[bool]{span: "quota.store.release"}, func(ctx context.Context) (bool, error) {
			return l.slotStore.ReleaseSlot(ctx, key, id)
		})
		l.tellBreaker(lat, err)
	}
	switch {
	case err == nil:
		return held || local, nil
	case local:
		return true, nil
	}
	return false, fmt.Errorf("%w: release of %q: %w", store.ErrStoreUnavailable, key, err)
}

// slotPlan checks key and id and resolves key's plan, which must have a
// concurrency limit when acquiring. An empty id is allowed only when
// acquiring.
func (l *Limiter) slotPlan(key, id string, acquiring bool) (Plan, error) {
	if err := CheckKey(key); err != nil {
		return Plan{}, err
	}
	if id != "" || !acquiring {
		if err := checkLeaseID(id); err != nil {
			return Plan{}, err
		}
	}
	plan, err := l.plans.Plan(key)
	if err != nil {
		return Plan{}, fmt.Errorf("region: plan for key %q: %w", key, err)
	}
	if err := plan.Validate(); err != nil {
		return Plan{}, fmt.Errorf("region: plan for key %q: %w", key, err)
	}
	if acquiring && plan.Concurrency == 0 {
		return Plan{}, fmt.Errorf("%w: key %q's plan %q has no concurrency limit", ErrNoConcurrency, key, plan.Name)
	}
	return plan, nil
}

// slotStoreUsable reports whether a slot call may try the store: the
// breaker is closed, or it lets this call probe (when Run does not probe
// in the background).
func (l *Limiter) slotStoreUsable() bool {
	if l.breaker.current() == BreakerClosed {
		return true
	}
	return !l.bgProbes.Load() && l.breaker.allow(l.now())
}

// degradedSlot decides an Acquire the store could not, by the plan's
// failure policy.
func (l *Limiter) degradedSlot(key string, plan Plan, s Slot) Slot {
	s.Degraded, s.FailurePolicy = true, plan.Policy()
	switch s.FailurePolicy {
	case FailOpen:
		s.Allowed, s.Expires = true, l.cfg.SlotTTL
	case FailClosed:
		s.RetryAfter = max(l.breaker.untilProbe(l.now()), time.Millisecond)
	default:
		limit := (plan.Concurrency + l.processes() - 1) / l.processes()
		s.Allowed, s.Held = l.local.acquire(key, s.ID, limit, l.now(), l.cfg.SlotTTL)
		if s.Allowed {
			s.Expires = l.cfg.SlotTTL
		} else {
			s.RetryAfter = max(l.cfg.SlotTTL/10, time.Millisecond)
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
