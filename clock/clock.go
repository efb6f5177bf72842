package clock

import "time"

// Clock tells the time and makes tickers and timers. Implementations are safe
// for concurrent use.
type Clock interface {
	// Now returns the current time. The system clock's reading carries a
	// monotonic part; Manual's does not.
	Now() time.Time
	// NewTicker behaves like time.NewTicker: d must be positive, and ticks
	// a slow receiver misses are dropped.
	NewTicker(d time.Duration) Ticker
	// NewTimer behaves like time.NewTimer: it fires once, after d.
	NewTimer(d time.Duration) Timer
}

// Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Timer delivers one tick on C unless stopped first.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so.
	Stop() bool
}

// System returns the real clock.
func System() Clock { return system{} }

type system struct{}

func (system) Now() time.Time                   { return time.Now() }
func (system) NewTicker(d time.Duration) Ticker { return sysTicker{time.NewTicker(d)} }
func (system) NewTimer(d time.Duration) Timer   { return sysTimer{time.NewTimer(d)} }

type sysTicker struct{ t *time.Ticker }

func (t sysTicker) C() <-chan time.Time { return t.t.C }
func (t sysTicker) Stop()               { t.t.Stop() }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }
