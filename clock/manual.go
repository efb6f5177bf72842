package clock

import (
	"sort"
	"sync"
	"time"
)

// Manual is a Clock whose time changes only through Set and Advance. Its
// tickers and timers fire when the clock reaches their deadline, from the
// goroutine that moved it; like time.Ticker, a tick that finds the channel
// full is dropped, so a ticker moved past several periods at once fires once.
// Readings carry no monotonic part. The zero value is not usable: use
// NewManual.
type Manual struct {
	mu      sync.Mutex
	now     time.Time  // guarded by mu
	waiters []*waiter  // guarded by mu; active tickers and timers
	changed *sync.Cond // signalled when waiters changes
}

// NewManual returns a Manual clock reading t.
func NewManual(t time.Time) *Manual {
	m := &Manual{now: t.Round(0)}
	m.changed = sync.NewCond(&m.mu)
	return m
}

// waiter is a ticker (period > 0) or a timer (period 0) of a Manual clock.
type waiter struct {
	clock  *Manual
	c      chan time.Time
	next   time.Time     // guarded by clock.mu
	period time.Duration // 0 for a timer
}

// Now returns the clock's reading.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// NewTicker returns a ticker that fires every d of clock time.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return manualTicker{m.add(d, d)}
}

// NewTimer returns a timer that fires once, d of clock time from now.
func (m *Manual) NewTimer(d time.Duration) Timer { return m.add(d, 0) }

// manualTicker is a waiter seen as a Ticker, whose Stop reports nothing.
type manualTicker struct{ w *waiter }

func (t manualTicker) C() <-chan time.Time { return t.w.c }
func (t manualTicker) Stop()               { t.w.Stop() }

func (m *Manual) add(d, period time.Duration) *waiter {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &waiter{clock: m, c: make(chan time.Time, 1), next: m.now.Add(d), period: period}
	if d <= 0 {
		w.c <- m.now
		return w
	}
	m.waiters = append(m.waiters, w)
	m.changed.Broadcast()
	return w
}

// Set moves the clock to t, firing every ticker and timer due by then in
// deadline order. Moving it backwards fires nothing.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = t.Round(0)
	m.fireLocked()
}

// Advance moves the clock forward by d; see Set.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	m.fireLocked()
}

func (m *Manual) fireLocked() {
	due := make([]*waiter, 0, len(m.waiters))
	for _, w := range m.waiters {
		if !w.next.After(m.now) {
			due = append(due, w)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].next.Before(due[j].next) })
	for _, w := range due {
		select {
		case w.c <- w.next:
		default: // the receiver has not taken the last tick: drop this one
		}
		if w.period == 0 {
			m.removeLocked(w)
			continue
		}
		for !w.next.After(m.now) {
			w.next = w.next.Add(w.period)
		}
	}
}

func (m *Manual) removeLocked(w *waiter) bool {
	for i, x := range m.waiters {
		if x == w {
			m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
			m.changed.Broadcast()
			return true
		}
	}
	return false
}

// Waiters returns how many tickers and timers are active.
func (m *Manual) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}

// BlockUntil waits until at least n tickers and timers are active: a test
// calls it to know that a loop has set up its tickers (or is waiting on a
// timer) before it advances the clock.
func (m *Manual) BlockUntil(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.waiters) < n {
		m.changed.Wait()
	}
}

func (w *waiter) C() <-chan time.Time { return w.c }

func (w *waiter) Stop() bool {
	w.clock.mu.Lock()
	defer w.clock.mu.Unlock()
	return w.clock.removeLocked(w)
}
