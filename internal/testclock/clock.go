// Package testclock is a clock for tests that moves only when told to.
package testclock

import (
	"sync"
	"time"
)

// Manual is a clock whose Now changes only through Set and Advance. It is
// safe for concurrent use. Its readings carry no monotonic part.
type Manual struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// New returns a clock reading t.
func New(t time.Time) *Manual { return &Manual{now: t.Round(0)} }

// Now returns the clock's reading.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Manual) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.Round(0)
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
