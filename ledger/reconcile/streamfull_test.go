package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/region"
)

// fillStream publishes reports of region eu until the stream refuses one
// for want of space, and returns how many it took.
func fillStream(t *testing.T, js jetstream.JetStream, cfg ledger.StreamConfig) int {
	t.Helper()
	pad := strings.Repeat("x", 200) // long keys: fewer messages to fill it
	for n := 0; n < 200_000; n += 500 {
		var futures []jetstream.PubAckFuture
		for i := n; i < n+500; i++ {
			rep := ledger.Report{Region: "eu", ProcessID: "filler", Key: "fill-" + strconv.Itoa(i) + pad,
				WindowStart: t0, WindowEnd: t0.Add(time.Minute), Spent: 1, Leased: 1, Seq: 1, Final: true, SentAt: t0}
			data, err := rep.Encode()
			if err != nil {
				t.Fatal(err)
			}
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: cfg.Subject("eu", "filler"), Data: data}, jetstream.WithMsgID(rep.MsgID()))
			if err != nil {
				t.Fatal(err)
			}
			futures = append(futures, f)
		}
		full := false
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				if !strings.Contains(err.Error(), "maximum bytes exceeded") {
					t.Fatalf("filling: %v", err)
				}
				full = true
			case <-time.After(10 * time.Second):
				t.Fatal("publish ack timeout")
			}
		}
		if full {
			return n
		}
	}
	t.Fatal("the stream never filled")
	return 0
}

func ledgerSpent(pool *pgxpool.Pool, key string) int64 {
	var n int64
	_ = pool.QueryRow(context.Background(), `SELECT coalesce(sum(spent), 0)::bigint FROM usage_reports WHERE key = $1`, key).Scan(&n)
	return n
}

// The reproduction (8 MiB stream): a stream full of reports no
// reconciler has written yet refuses another region's report, and that
// region's Flush says so (ErrStreamFull, counted) instead of returning
// nil. Once the reconciler writes what the stream holds, its
// acknowledgements empty the stream (work-queue retention), the spooled
// report goes through, and the ledger holds it.
func TestFullStreamIsAnErrorAndWritingEmptiesIt(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL) // creates the default stream; replaced below
	ctx := context.Background()
	cfg := ledger.DefaultStreamConfig()
	cfg.MaxBytes = 8 << 20
	if err := js.DeleteStream(ctx, cfg.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	filled := fillStream(t, js, cfg)

	clk := clock.NewManual(t0.Add(10 * time.Second))
	us, m := newReporter(t, js, "p-us", func(c *ledger.Config) {
		c.Region, c.Clock, c.Stream = "us", clk, cfg
	})
	defer us.Close(ctx)
	us.Record([]region.Usage{{Key: "us-key", WindowStart: t0, Spent: 10, Leased: 10}})
	err := us.Flush(ctx)
	if !errors.Is(err, ledger.ErrStreamFull) {
		t.Fatalf("Flush into a full stream: %v, want ErrStreamFull", err)
	}
	if got := val(m.StreamFull); got < 1 {
		t.Fatalf("quota_ledger_stream_full_total %v, want ≥ 1", got)
	}

	x := startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) { c.Stream = cfg })
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	fullest := 0.0 // quota_reconciler_stream_fill_ratio, first read after the first batch
	testserver.WaitFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		fullest = max(fullest, val(x.m.StreamFill))
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("the stream still holds %d messages (%d bytes) of %d written", info.State.Msgs, info.State.Bytes, filled)
		}
		return nil
	})
	if fullest < 0.2 {
		t.Fatalf("stream fill ratio at most %v while the reconciler wrote a full stream", fullest)
	}
	if err := us.Flush(ctx); err != nil {
		t.Fatalf("Flush once the stream has room: %v", err)
	}
	testserver.WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n := ledgerSpent(pool, "us-key"); n != 10 {
			return fmt.Errorf("ledger holds %d for us-key, want 10", n)
		}
		return nil
	})
}

// MigrateStream replaces a stream with limits retention (made before
// work-queue retention) by a work-queue one once the reconciler has
// written everything the old one held; reports published meanwhile wait
// in the spool and reach the ledger afterwards. Nothing is lost or
// counted twice.
func TestMigrateStreamFromLimitsRetention(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	ctx := context.Background()
	legacy := ledger.DefaultStreamConfig()
	legacy.Retention = jetstream.LimitsPolicy
	if err := js.DeleteStream(ctx, legacy.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.EnsureStream(ctx, js, legacy); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(t0.Add(10 * time.Second))
	r, rm := newReporter(t, js, "p-eu", func(c *ledger.Config) { c.Clock = clk })
	defer r.Close(ctx)
	r.Record([]region.Usage{{Key: "k", WindowStart: t0, Spent: 5, Leased: 5}})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The reconciler of this release binds to the old stream (a warning,
	// not a refusal) and writes it.
	x := startReconciler(t, js, reconcile.NewWriter(pool), nil)
	waitSpent(t, pool, map[string]int64{"k": 5}, 30*time.Second)
	s, err := js.Stream(ctx, legacy.Name)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs == 0 {
		t.Fatalf("limits retention: the written report should still be there: %v, %v", info, err)
	}

	// With the reconciler away, a report waits in the old stream: the
	// migration waits for it, and when its wait ends first it reopens the
	// stream and deletes nothing.
	x.stop(t)
	before := s.CachedInfo().State.LastSeq
	r.Record([]region.Usage{{Key: "k", WindowStart: t0, Spent: 3, Leased: 3}})
	// A flush whose publish times out (a loaded machine) spools the report
	// and returns nil: flush until the stream holds it.
	testserver.WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if err := r.Flush(ctx); err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.LastSeq <= before {
			return fmt.Errorf("the report is not in the stream yet (last sequence %d)", info.State.LastSeq)
		}
		return nil
	})
	var consumers []string
	for ci := range s.ListConsumers(ctx).Info() {
		consumers = append(consumers, fmt.Sprintf("%s pending %d ack-pending %d waiting %d delivered %d ack floor %d",
			ci.Name, ci.NumPending, ci.NumAckPending, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream))
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	migrated, err := ledger.MigrateStream(short, js, ledger.DefaultStreamConfig(), 20*time.Millisecond)
	cancelShort()
	if err == nil || migrated {
		t.Fatalf("MigrateStream with a report unwritten: %v, %v; want an error (consumers before: %v; stream last seq %d before the report)", migrated, err, consumers, before)
	}
	if s, err = js.Stream(ctx, legacy.Name); err != nil || s.CachedInfo().Config.Retention != jetstream.LimitsPolicy ||
		s.CachedInfo().Config.MaxBytes != legacy.MaxBytes || s.CachedInfo().Config.Metadata[ledger.MigratingKey] != "" {
		t.Fatalf("after a migration that gave up: %v, %+v", err, s.CachedInfo().Config)
	}

	// While the migration waits, the stream refuses new reports as a full
	// one (they wait in the spool) and a reconciler started meanwhile
	// binds to it and writes what it holds; only then is it replaced.
	done := make(chan error, 1)
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		ok, err := ledger.MigrateStream(mctx, js, ledger.DefaultStreamConfig(), 20*time.Millisecond)
		if err == nil && !ok {
			err = errors.New("nothing migrated")
		}
		done <- err
	}()
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		s, err := js.Stream(ctx, legacy.Name)
		if err != nil || s.CachedInfo().Config.Metadata[ledger.MigratingKey] == "" {
			return fmt.Errorf("not closed yet (%v)", err)
		}
		return nil
	})
	r.Record([]region.Usage{{Key: "k", WindowStart: t0, Spent: 1, Leased: 1}})
	if err := r.Flush(ctx); !errors.Is(err, ledger.ErrStreamFull) {
		t.Fatalf("Flush into the stream being migrated: %v, want ErrStreamFull (spooled)", err)
	}
	y := startReconciler(t, js, reconcile.NewWriter(pool), nil)
	if err := <-done; err != nil {
		t.Fatalf("MigrateStream: %v", err)
	}
	if n := ledgerSpent(pool, "k"); n != 8 {
		t.Fatalf("ledger holds %d for k when the old stream is deleted, want 8", n)
	}
	s, err = js.Stream(ctx, legacy.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Retention; got != jetstream.WorkQueuePolicy {
		t.Fatalf("retention after MigrateStream: %v", got)
	}
	r.Record([]region.Usage{{Key: "k", WindowStart: t0, Spent: 2, Leased: 2}})
	testserver.WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if err := r.Flush(ctx); err != nil {
			return err
		}
		if n := ledgerSpent(pool, "k"); n != 11 {
			return fmt.Errorf("ledger holds %d for k, want 11 (reports published %v, spooled %v; the reconciler re-bound %v times, ready: %v)",
				n, ledgertest.MetricValue(rm.Published), ledgertest.MetricValue(rm.SpoolReports), ledgertest.MetricValue(y.m.Rebinds), y.r.Ready())
		}
		info, err := s.Info(ctx)
		if err != nil || info.State.Msgs != 0 {
			return fmt.Errorf("the new stream holds %v messages (%v)", info.State.Msgs, err)
		}
		return nil
	})
	if again, err := ledger.MigrateStream(mctx, js, ledger.DefaultStreamConfig(), time.Second); err != nil || again {
		t.Fatalf("MigrateStream of a work-queue stream: %v, %v; want nothing done", again, err)
	}
}
