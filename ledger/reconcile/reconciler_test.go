package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// stream of cumulative reports for keys k0..k(n-1), two processes each,
// seq 1..steps; the last one final. Spent of (key i, process p) at seq s is
// s*(i+1); the expected total per key is 2*steps*(i+1).
func cumulativeStream(keys, steps int) ([]ledger.Report, map[string]int64) {
	var out []ledger.Report
	want := map[string]int64{}
	for s := 1; s <= steps; s++ {
		for i := range keys {
			for _, p := range []string{"p1", "p2"} {
				k := fmt.Sprintf("k%d", i)
				out = append(out, rep(k, p, int64(s), int64(s*(i+1)), int64(s*(i+1)+1), s == steps))
				want[k] = int64(2 * steps * (i + 1))
			}
		}
	}
	return out, want
}

func TestDuplicatesAndRedeliveriesDoNotChangeTotals(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	// A stream that keeps written reports (limits retention, from before
	// work-queue retention), so that a second consumer can replay them.
	legacyStream(t, js)
	reps, want := cumulativeStream(5, 4)
	publish(t, js, "", reps...)
	// Same message IDs again: JetStream drops them.
	publish(t, js, "", reps[:10]...)
	// The same reports under new IDs (a process re-sending from its spool
	// after the duplicate window), and in reverse order.
	for i := len(reps) - 1; i >= 0; i-- {
		publish(t, js, fmt.Sprintf("resend-%d", i), reps[i])
	}
	x := startReconciler(t, js, reconcile.NewWriter(pool), nil)
	waitSpent(t, pool, want, 20*time.Second)
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := val(x.m.Reports); n != float64(2*len(reps)) {
			return fmt.Errorf("%v reports acked, want %d", n, 2*len(reps))
		}
		return nil
	})
	x.stop(t)

	// A second consumer reads the whole stream again (as after a lost
	// consumer): redelivered reports change nothing.
	y := startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) { c.Durable = "replay" })
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if n := val(y.m.Reports); n != float64(2*len(reps)) {
			return fmt.Errorf("%v reports replayed", n)
		}
		return nil
	})
	if got := spent(t, pool); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after replay: %v, want %v", got, want)
	}
	if ins := val(y.m.Rows.WithLabelValues("inserted")); ins != 0 {
		t.Fatalf("replay inserted %v rows", ins)
	}
}

func TestPostgresStoppedMidStream(t *testing.T) {
	pg := testserver.StartPostgres(t)
	pool := migratedPool(t, pg.URL)
	js := connect(t, testserver.StartNATS(t).URL)
	reps, want := cumulativeStream(10, 6)
	half := len(reps) / 2
	x := startReconciler(t, js, reconcile.NewWriter(pool), nil)
	publish(t, js, "", reps[:half]...)
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if n := val(x.m.Reports); n != float64(half) {
			return fmt.Errorf("%v reports acked, want %d", n, half)
		}
		return nil
	})
	pg.Stop()
	publish(t, js, "", reps[half:]...)
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if val(x.m.WriteErrors) < 2 {
			return errors.New("no failed writes yet")
		}
		if x.r.Ready() == nil {
			return errors.New("still ready while Postgres is down")
		}
		return nil
	})
	if n := val(x.m.Reports); n != float64(half) {
		t.Fatalf("%v reports acked while Postgres was down, want %d", n, half)
	}
	pg.Start(t)
	waitSpent(t, pool, want, 30*time.Second)
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error { return x.r.Ready() })
}

// crashingStore commits the first batch it sees and then "crashes" the
// reconciler before it can ack: the worst moment to die.
type crashingStore struct {
	w       *reconcile.Writer
	mu      sync.Mutex
	crashed bool
	crash   func()
}

func (s *crashingStore) Write(ctx context.Context, reps []ledger.Report) (reconcile.WriteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crashed {
		return reconcile.WriteResult{}, errors.New("dead")
	}
	res, err := s.w.Write(ctx, reps)
	if err == nil {
		s.crashed = true
		s.crash()
		return res, errors.New("killed after commit, before ack")
	}
	return res, err
}

func (s *crashingStore) DeadLetter(ctx context.Context, letters []reconcile.DeadLetter) error {
	return s.w.DeadLetter(ctx, letters)
}

// blockingStore never commits: a reconciler killed while writing.
type blockingStore struct{ called func() }

func (s blockingStore) Write(ctx context.Context, _ []ledger.Report) (reconcile.WriteResult, error) {
	s.called()
	<-ctx.Done()
	return reconcile.WriteResult{}, ctx.Err()
}

func (s blockingStore) DeadLetter(ctx context.Context, _ []reconcile.DeadLetter) error {
	s.called()
	<-ctx.Done()
	return ctx.Err()
}

func TestReconcilerKilledMidBatch(t *testing.T) {
	tests := []struct {
		name  string
		store func(w *reconcile.Writer, crash func()) reconcile.Store
	}{
		{"killed after commit before ack", func(w *reconcile.Writer, crash func()) reconcile.Store {
			return &crashingStore{w: w, crash: crash}
		}},
		{"killed during the write", func(_ *reconcile.Writer, called func()) reconcile.Store { return blockingStore{called} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := migratedPool(t, ledgertest.MigratedDatabase(t))
			js := connect(t, testserver.StartNATS(t).URL)
			reps, want := cumulativeStream(8, 5)
			publish(t, js, "", reps...)
			fast := func(c *reconcile.Config) { c.AckWait = time.Second; c.BatchSize = 25 }
			var x *running
			crashed := make(chan struct{})
			var once sync.Once
			store := tt.store(reconcile.NewWriter(pool), func() { once.Do(func() { close(crashed) }) })
			x = startReconciler(t, js, store, fast)
			<-crashed // the store was called
			x.stop(t)
			if n := val(x.m.Reports); n != 0 {
				t.Fatalf("killed reconciler acked %v reports", n)
			}
			y := startReconciler(t, js, reconcile.NewWriter(pool), fast)
			waitSpent(t, pool, want, 30*time.Second)
			testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
				if val(y.m.Redeliveries) == 0 {
					return errors.New("no redelivery seen")
				}
				return nil
			})
		})
	}
}
