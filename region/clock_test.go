package region_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/region"
)

// testEpoch is where manual clocks start: mid-month, mid-week, mid-day in
// every zone the tests' plans use, so that no test meets a calendar edge
// unless it walks to one, whatever the day it runs.
var testEpoch = time.Date(2027, 3, 17, 12, 0, 0, 0, time.UTC) // a Wednesday

func newManualClock() *clock.Manual { return clock.NewManual(testEpoch) }

// storeClock is a manual clock started at rdb's time, for a limiter on a
// Redis store: quota periods are judged by the store's clock, which a test
// cannot move, so the limiter's starts there (it still learns the offset).
func storeClock(t testing.TB, rdb redis.Cmdable) *clock.Manual {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("redis TIME: %v", err)
	}
	return clock.NewManual(now.Truncate(time.Second))
}

// midPeriod is a plan zone and anchor day that put now mid-day and
// mid-month, so that a test on a store whose clock it cannot set (Redis)
// meets no period's end, whatever the day: a fixed-offset zone where now
// is about noon, and a month anchored about two weeks from today.
func midPeriod(now time.Time) (zone string, anchor int) {
	offset := 12 - now.UTC().Hour() // hours east of UTC that make it noon
	if offset > 12 {
		offset -= 24
	}
	// Etc/GMT's sign is POSIX's: Etc/GMT-3 is three hours east of UTC.
	switch {
	case offset == 0:
		zone = "UTC"
	case offset > 0:
		zone = fmt.Sprintf("Etc/GMT-%d", offset)
	default:
		zone = fmt.Sprintf("Etc/GMT+%d", -offset)
	}
	local := now.In(time.FixedZone("", offset*3600))
	return zone, (local.Day()+13)%28 + 1
}

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
