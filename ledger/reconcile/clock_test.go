package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// These tests run the Reconciler on a clock.Manual: its batching, backoff
// and idle check wait for the test to move the clock, never for real time.

// clockedStore records each Write's batch size and clock reading, and
// fails the first failures Writes transiently (Postgres away).
type clockedStore struct {
	clk      *clock.Manual
	mu       sync.Mutex
	failures int
	writes   []clockedWrite // guarded by mu
	called   chan struct{}  // one send per Write, buffered
}

type clockedWrite struct {
	at      time.Time
	reports int
	failed  bool
}

func newClockedStore(clk *clock.Manual, failures int) *clockedStore {
	return &clockedStore{clk: clk, failures: failures, called: make(chan struct{}, 100)}
}

func (s *clockedStore) Write(_ context.Context, reps []ledger.Report) (reconcile.WriteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := clockedWrite{at: s.clk.Now(), reports: len(reps), failed: len(s.writes) < s.failures}
	s.writes = append(s.writes, w)
	s.called <- struct{}{}
	if w.failed {
		return reconcile.WriteResult{}, errors.New("test: connection refused")
	}
	return reconcile.WriteResult{Rows: len(reps), Inserted: len(reps)}, nil
}

func (s *clockedStore) DeadLetter(context.Context, []reconcile.DeadLetter) error { return nil }

func (s *clockedStore) get() []clockedWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// written is the reports written (not failed) so far.
func (s *clockedStore) written() int {
	n := 0
	for _, w := range s.get() {
		if !w.failed {
			n += w.reports
		}
	}
	return n
}

// waitCall waits for the store's next Write.
func (s *clockedStore) waitCall(t *testing.T) {
	t.Helper()
	select {
	case <-s.called:
	case <-time.After(10 * time.Second):
		t.Fatal("no Write within 10s")
	}
}

// onClock starts a reconciler on a manual clock, on a NATS server of its
// own.
func onClock(t *testing.T, store reconcile.Store, clk *clock.Manual, mod func(*reconcile.Config)) (*running, jetstream.JetStream) {
	t.Helper()
	js := connect(t, testserver.StartNATS(t).URL)
	x := startReconciler(t, js, store, func(c *reconcile.Config) {
		c.Clock = clk
		if mod != nil {
			mod(c)
		}
	})
	return x, js
}

// A batch that is not full waits BatchInterval of clock time: reports
// delivered while the clock stands still are not written, and are once
// it moves on.
func TestGatheringWaitsForTheClock(t *testing.T) {
	clk := clock.NewManual(time.Now())
	store := newClockedStore(clk, 0)
	const interval = time.Minute
	x, js := onClock(t, store, clk, func(c *reconcile.Config) { c.BatchInterval = interval })
	publish(t, js, "", rep("a", "p1", 1, 1, 1, false), rep("b", "p1", 1, 1, 1, false), rep("c", "p1", 1, 1, 1, false))
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		cons, err := js.Consumer(context.Background(), ledger.DefaultStream, reconcile.DefaultConfig().Durable)
		if err != nil {
			return err // not bound yet
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != 3 {
			return fmt.Errorf("%d reports delivered, want 3", info.NumAckPending)
		}
		return nil
	})
	if w := store.get(); len(w) != 0 {
		t.Fatalf("written before the batch interval passed on the clock: %+v", w)
	}
	// The three may have come in one gathering or several: each ends
	// when the clock passes its interval.
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := store.written(); n != 3 {
			clk.Advance(interval)
			return fmt.Errorf("%d reports written, want 3", n)
		}
		return nil
	})
	if n := val(x.m.Reports); n != 3 {
		t.Fatalf("%v reports acknowledged, want 3", n)
	}
}

// A full batch (BatchSize reports) is written at once: it does not wait
// for the clock.
func TestFullBatchDoesNotWaitForTheClock(t *testing.T) {
	clk := clock.NewManual(time.Now())
	store := newClockedStore(clk, 0)
	_, js := onClock(t, store, clk, func(c *reconcile.Config) { c.BatchSize = 3 })
	publish(t, js, "", rep("a", "p1", 1, 1, 1, false), rep("b", "p1", 1, 1, 1, false), rep("c", "p1", 1, 1, 1, false))
	store.waitCall(t)
	if w := store.get(); len(w) != 1 || w[0].reports != 3 {
		t.Fatalf("writes %+v, want one of 3 reports", w)
	}
}

// A failing write is retried after RetryMin of clock time, doubling up to
// RetryMax; the reconciler is not ready meanwhile, and is once it writes.
func TestWriteRetriesBackOffOnTheClock(t *testing.T) {
	clk := clock.NewManual(time.Now())
	store := newClockedStore(clk, 4)
	x, js := onClock(t, store, clk, func(c *reconcile.Config) {
		c.BatchSize = 1
		c.RetryMin, c.RetryMax = 20*time.Millisecond, 50*time.Millisecond
	})
	publish(t, js, "", rep("a", "p1", 1, 1, 1, false))
	store.waitCall(t)
	// Move the clock 10ms at a time, each time once the reconciler waits
	// on a timer (the backoff's: the batch is full), so that every retry
	// happens exactly at its deadline.
	for len(store.get()) < 5 {
		clk.BlockUntil(1)
		if len(store.get()) < 5 && x.r.Ready() == nil {
			t.Fatal("ready while its writes fail")
		}
		clk.Advance(10 * time.Millisecond)
	}
	w := store.get()
	var gaps []time.Duration
	for i := 1; i < len(w); i++ {
		gaps = append(gaps, w[i].at.Sub(w[i-1].at))
	}
	if want := []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}; !slices.Equal(gaps, want) {
		t.Fatalf("retries after %v of clock time, want %v", gaps, want)
	}
	if w[4].failed || w[4].reports != 1 {
		t.Fatalf("fifth write %+v, want one report written", w[4])
	}
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error { return x.r.Ready() })
}
