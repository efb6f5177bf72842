package region

import (
	"sync"
	"time"
)

// BreakerState is the circuit breaker's state.
type BreakerState int32

const (
	// BreakerClosed: the store is healthy and every miss calls it.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the store failed BreakerThreshold times in a row; misses
	// degrade without calling it until BreakerCooldown has passed.
	BreakerOpen
	// BreakerHalfOpen: one probe call is trying the store; other misses
	// degrade until it answers.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "unknown"
}

// breaker decides whether a slow-path call may try the store. It is touched
// on the slow path only, so a mutex is cheap enough.
type breaker struct {
	threshold int
	cooldown  time.Duration
	onChange  func(BreakerState)

	mu       sync.Mutex
	state    BreakerState // guarded by mu
	failures int          // consecutive failures; guarded by mu
	total    int64        // failures since the breaker was made; guarded by mu
	openedAt int64        // limiter ns the breaker last opened; guarded by mu
}

// allow reports whether a store call may be made at limiter time now. In the
// open state, after the cooldown, exactly one caller becomes the probe.
func (b *breaker) allow(now int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if time.Duration(now-b.openedAt) >= b.cooldown {
			b.setLocked(BreakerHalfOpen)
			return true
		}
	}
	return false
}

func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	if b.state != BreakerClosed {
		b.setLocked(BreakerClosed)
	}
}

// failure counts one store call that failed for the store's availability
// (store.IsTransient) or answered slower than the timeout. An error about one
// key (store.ErrStoreRejected) is not a failure: the store answered.
func (b *breaker) failure(now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	b.total++
	if b.state == BreakerHalfOpen || (b.state == BreakerClosed && b.failures >= b.threshold) {
		b.openedAt = now
		b.setLocked(BreakerOpen)
	}
}

// abandon gives up a probe that made no store call: the breaker opens
// again with its old opening time, so the next caller may probe at once.
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerHalfOpen {
		b.setLocked(BreakerOpen)
	}
}

// healthy reports whether the last store call succeeded: the breaker is
// closed and no failure has been counted since. Only then does a call carry
// degraded debt, because a call that times out may still run on the store,
// and its debt, kept for the next call, would be charged twice.
func (b *breaker) healthy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == BreakerClosed && b.failures == 0
}

// failuresTotal is the number of failures counted since the breaker was
// made.
func (b *breaker) failuresTotal() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (b *breaker) setLocked(s BreakerState) {
	b.state = s
	if b.onChange != nil {
		b.onChange(s)
	}
}

// untilProbe is how long after limiter time now the breaker lets a probe
// try the store: the rest of the cooldown while open, a cooldown while a
// probe is out, and zero while closed.
func (b *breaker) untilProbe(now int64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerOpen:
		return max(b.cooldown-time.Duration(now-b.openedAt), 0)
	case BreakerHalfOpen:
		return b.cooldown
	}
	return 0
}
