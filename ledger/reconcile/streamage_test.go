package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// downStore fails every write (a transient error: Postgres away) while
// down is set, and counts the reports written after.
type downStore struct {
	down    atomic.Bool
	written atomic.Int64
}

func (s *downStore) Write(_ context.Context, reps []ledger.Report) (reconcile.WriteResult, error) {
	if s.down.Load() {
		return reconcile.WriteResult{}, errors.New("test: connection refused")
	}
	s.written.Add(int64(len(reps)))
	return reconcile.WriteResult{Rows: len(reps), Inserted: len(reps)}, nil
}

func (s *downStore) DeadLetter(context.Context, []reconcile.DeadLetter) error { return nil }

// bareJetStream connects without creating the usage stream.
func bareJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(testserver.StartNATS(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A reconciler refuses a usage stream whose limits differ from its
// configuration (here the 7-day age limit streams were created with
// before): it is not ready, says which setting differs, and changes
// nothing; once the operator edits the stream it binds and consumes.
func TestReconcilerRefusesAStreamWithOtherLimits(t *testing.T) {
	js := bareJetStream(t)
	ctx := context.Background()
	sc := ledger.DefaultStreamConfig()
	old := jetstream.StreamConfig{Name: sc.Name, Subjects: []string{sc.SubjectPrefix + ".>"}, Storage: jetstream.FileStorage,
		MaxAge: 7 * 24 * time.Hour, MaxBytes: sc.MaxBytes, Duplicates: sc.DuplicateWindow, Discard: jetstream.DiscardNew}
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	store := &downStore{}
	x := startReconciler(t, js, store, nil)
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		err := x.r.Ready()
		if err == nil || !strings.Contains(err.Error(), "MaxAge (max_age) is 168h0m0s, the configuration says 0 (no age limit)") {
			return fmt.Errorf("Ready() = %v, want the refusal naming MaxAge", err)
		}
		return nil
	})
	s, err := js.Stream(ctx, sc.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != old.MaxAge {
		t.Fatalf("the reconciler changed the stream's max age to %v", got)
	}
	if _, err := js.Consumer(ctx, sc.Name, "reconciler"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("a consumer was bound on the refused stream: %v", err)
	}

	edited := s.CachedInfo().Config
	edited.MaxAge = 0
	if _, err := js.UpdateStream(ctx, edited); err != nil {
		t.Fatal(err)
	}
	publish(t, js, "", rep("k", "p1", 1, 2, 2, true))
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if store.written.Load() != 1 {
			return errors.New("the report is not written yet")
		}
		return x.r.Ready()
	})
}

// The oldest-unwritten gauge holds the publish time of the batch the
// reconciler cannot write (Postgres away), so its age grows for the
// alert; once written and caught up it is 0.
func TestOldestUnwrittenReportGauge(t *testing.T) {
	js := connect(t, testserver.StartNATS(t).URL)
	store := &downStore{}
	store.down.Store(true)
	// On a manual clock the retries and the idle check wait for the test,
	// not for seconds of real time.
	clk := clock.NewManual(time.Now())
	x := startReconciler(t, js, store, func(c *reconcile.Config) { c.Clock, c.BatchSize = clk, 1 })
	before := time.Now()
	publish(t, js, "", rep("k", "p1", 1, 2, 2, true))
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if v := val(x.m.OldestUnwritten); v == 0 {
			return errors.New("gauge still 0")
		}
		return nil
	})
	published := val(x.m.OldestUnwritten)
	if at := time.Unix(0, int64(published*1e9)); at.Before(before.Add(-time.Second)) || at.After(time.Now()) {
		t.Fatalf("oldest unwritten report published at %v, want between %v and now", at, before)
	}
	store.down.Store(false)
	// Each poll moves the clock past the longest backoff and the idle
	// check (5s without a message), after which the gauge is 0.
	testserver.WaitFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if v := val(x.m.OldestUnwritten); v != 0 || store.written.Load() != 1 {
			clk.Advance(5 * time.Second)
			return fmt.Errorf("gauge %v, written %d; want 0 and 1 once caught up", v, store.written.Load())
		}
		return nil
	})
}
