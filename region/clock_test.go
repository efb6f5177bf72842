package region_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/region"
)

func newManualClock() *clock.Manual { return clock.NewManual(time.Now().Truncate(time.Second)) }

// runOn runs lim's loop until the test ends or stop is called, and returns
// once the loop has made its sweep and flush tickers on clk: from then on,
// advancing clk drives the loop. stop ends the loop and waits for it, which
// drains the limiter after the loop's last sweep.
func runOn(tb testing.TB, lim *region.Limiter, clk *clock.Manual) (stop func()) {
	tb.Helper()
	n := clk.Waiters() + 2
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := lim.Run(ctx); err != nil {
			tb.Errorf("Run: %v", err)
		}
	}()
	stop = func() { cancel(); <-done }
	tb.Cleanup(stop)
	ready := make(chan struct{})
	go func() { clk.BlockUntil(n); close(ready) }()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		tb.Fatalf("Run made no tickers on the clock within 5s")
	}
	return stop
}
