package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// daemonParts are what the daemon's own graph built: its limiter (with Run
// running from the graph's start hook), the limiter's config and the
// catalogue.
type daemonParts struct {
	lim *region.Limiter
	cfg region.Config
	cat *catalog.Catalog
}

// startParts starts the daemon's graph with o, stopped when tb ends, and
// waits until its limiter's loop keeps the coarse clock.
func startParts(tb testing.TB, o Options) daemonParts {
	tb.Helper()
	var b daemonParts
	app := fx.New(appOptions(o, io.Discard), fx.Populate(&b.lim, &b.cfg, &b.cat), fx.NopLogger)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		tb.Fatalf("start daemon: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			tb.Errorf("stop daemon: %v", err)
		}
	})
	testserver.WaitFor(tb, 5*time.Second, time.Millisecond, func() error {
		if !b.lim.CoarseClock() {
			return errors.New("the daemon's limiter does not read the coarse clock")
		}
		return nil
	})
	return b
}

// The limiter the daemon builds decides on the coarse clock, also with
// --clock-skew, whose skew it applies itself: a process whose wall clock
// runs 500 ms ahead learns a store clock offset of about −500 ms from the
// (unskewed) in-process store.
func TestDaemonLimiterClock(t *testing.T) {
	o := testOptions(t, "", "", t.TempDir())
	o.Limiter.ClockOffset = 500 * time.Millisecond
	b := startParts(t, o) // fails unless CoarseClock
	if b.cfg.Clock != nil || b.cfg.ClockOffset != o.Limiter.ClockOffset {
		t.Fatalf("limiter config: Clock %v, ClockOffset %v; want nil and %v", b.cfg.Clock, b.cfg.ClockOffset, o.Limiter.ClockOffset)
	}
	if _, err := b.lim.Allow(context.Background(), "acct_skew", 1); err != nil {
		t.Fatal(err)
	}
	if off := b.lim.Stats().ClockOffset; off > -400*time.Millisecond || off < -600*time.Millisecond {
		t.Fatalf("learned store clock offset %v, want about %v", off, -o.Limiter.ClockOffset)
	}
	// A clock of the caller's own, even the system clock, is read on every
	// decision: no coarse clock while Run runs (it has flushed).
	cfg := b.cfg
	sink := &recordingSink{spent: map[string]int64{}}
	cfg.Clock, cfg.Usage, cfg.FlushInterval = clock.System(), sink, time.Millisecond
	lim, err := region.New(memstore.New(nil), b.cat, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runLimiter(t, lim)
	if _, err := lim.Allow(context.Background(), "acct_system", 1); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 5*time.Second, time.Millisecond, func() error {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if sink.spent["acct_system"] == 0 {
			return errors.New("Run has not flushed yet")
		}
		return nil
	})
	if lim.CoarseClock() {
		t.Fatal("a limiter with Config.Clock set reads the coarse clock")
	}
}

// runLimiter runs lim's loop until tb ends.
func runLimiter(tb testing.TB, lim *region.Limiter) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := lim.Run(ctx); err != nil {
			tb.Errorf("Run: %v", err)
		}
	}()
	tb.Cleanup(func() { cancel(); <-done })
}

// BenchmarkDaemonAllow measures Allow's fast path on the limiter the daemon
// builds (Config.Clock nil: decisions read the coarse clock Run keeps)
// beside one with the same config but an explicit clock.System(), which is
// read on every decision; Run runs for both.
func BenchmarkDaemonAllow(b *testing.B) {
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	o.Listen, o.DataDir, o.LogLevel, o.ShutdownDelay = "127.0.0.1:0", b.TempDir(), "error", 0
	o.DefaultPlan.Rate, o.DefaultPlan.Capacity = 1e9, 1e9 // leases grow to the cap: every decision below is on the fast path
	d := startParts(b, o)
	cfg := d.cfg
	cfg.Clock, cfg.Usage = clock.System(), nil
	sys, err := region.New(memstore.New(nil), d.cat, cfg)
	if err != nil {
		b.Fatal(err)
	}
	runLimiter(b, sys)
	for _, lc := range []struct {
		name string
		lim  *region.Limiter
	}{{"daemon", d.lim}, {"clock.System", sys}} {
		ctx := context.Background()
		for range 100 { // grow the lease
			if _, err := lc.lim.Allow(ctx, "hot", 1); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(lc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := lc.lim.Allow(ctx, "hot", 1); !d.Allowed {
					b.Fatal("rejected")
				}
			}
		})
		b.Run(lc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					lc.lim.Allow(ctx, "hot", 1)
				}
			})
		})
		if lc.lim.CoarseClock() != (lc.name == "daemon") {
			b.Fatalf("%s: CoarseClock %v", lc.name, lc.lim.CoarseClock())
		}
	}
}
