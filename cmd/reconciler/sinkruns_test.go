package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger/export"
)

// A --continuous run passes until its context is cancelled (SIGTERM),
// going on after a failed pass; a single run returns its pass's error.
// Each continuous pass covers the current UTC month up to the current
// period.
func TestSinkPasses(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	boom := errors.New("sink down")
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := passes(context.Background(), options{}, clock.NewManual(start), log, func(_ context.Context, now time.Time) error {
		if !now.Equal(start) {
			t.Errorf("single pass at %v, want the clock's %v", now, start)
		}
		return boom
	}); err != boom {
		t.Fatalf("single run: %v, want its pass's error", err)
	}

	// A continuous run passes once at once, then once per --every of the
	// clock's time, each at the clock's now.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clock.NewManual(start)
	o := options{Continuous: true, Every: time.Minute}
	at := make(chan time.Time)
	done := make(chan error, 1)
	go func() {
		done <- passes(ctx, o, clk, log, func(_ context.Context, now time.Time) error {
			at <- now
			return boom
		})
	}()
	for i := range 3 {
		want := start.Add(time.Duration(i) * time.Minute)
		if got := <-at; !got.Equal(want) {
			t.Fatalf("pass %d at %v, want %v (failed passes go on, one per --every)", i, got, want)
		}
		clk.BlockUntil(1) // the ticker is waiting
		clk.Advance(time.Minute)
	}
	<-at
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("continuous run ended with %v, want nil once cancelled", err)
	}
	late := time.Date(2026, 12, 31, 23, 20, 0, 0, time.UTC)
	from, to := o.passRange(export.Hour, late)
	if !from.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || !to.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("continuous hour pass at %v covers [%v, %v)", late, from, to)
	}
}
