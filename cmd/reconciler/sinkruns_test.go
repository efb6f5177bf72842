package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger/export"
)

// A --continuous run passes until its context is cancelled (SIGTERM),
// going on after a failed pass; a single run returns its pass's error.
// Each continuous pass covers the current UTC month up to the current
// period.
func TestSinkPasses(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	boom := errors.New("sink down")
	if err := passes(context.Background(), options{}, log, func(context.Context, time.Time) error { return boom }); err != boom {
		t.Fatalf("single run: %v, want its pass's error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	o := options{Continuous: true, Every: time.Millisecond}
	err := passes(ctx, o, log, func(context.Context, time.Time) error {
		calls++
		if calls == 3 {
			cancel()
		}
		return boom
	})
	if err != nil || calls != 3 {
		t.Fatalf("continuous run: %v after %d passes, want nil after 3 (failed passes go on)", err, calls)
	}
	at := time.Date(2026, 12, 31, 23, 20, 0, 0, time.UTC)
	from, to := o.passRange(export.Hour, at)
	if !from.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || !to.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("continuous hour pass at %v covers [%v, %v)", at, from, to)
	}
}
