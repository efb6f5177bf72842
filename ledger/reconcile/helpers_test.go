package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/migrations"
)

// migratedPool migrates the database at url and returns a pool on it.
func migratedPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	if _, err := migrations.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(20000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.EnsureStream(context.Background(), js, ledger.DefaultStreamConfig()); err != nil {
		t.Fatal(err)
	}
	return js
}

// legacyStream replaces the usage stream with one of limits retention,
// as made before work-queue retention: it keeps written reports.
func legacyStream(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	if err := js.DeleteStream(ctx, ledger.DefaultStream); err != nil {
		t.Fatal(err)
	}
	cfg := ledger.DefaultStreamConfig()
	cfg.Retention = jetstream.LimitsPolicy
	if _, err := ledger.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
}

// publish sends reports with their message IDs (or msgID when not empty).
func publish(t testing.TB, js jetstream.JetStream, msgID string, reps ...ledger.Report) {
	t.Helper()
	var futures []jetstream.PubAckFuture
	for i := range reps {
		data, err := reps[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		id := msgID
		if id == "" {
			id = reps[i].MsgID()
		}
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: ledger.DefaultStreamConfig().Subject(reps[i].Region, reps[i].ProcessID), Data: data},
			jetstream.WithMsgID(id))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("publish ack timeout")
		}
	}
}

type running struct {
	r      *reconcile.Reconciler
	m      *reconcile.Metrics
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// stop cancels the reconciler and waits for Run to return.
func (x *running) stop(t testing.TB) {
	x.once.Do(func() {
		x.cancel()
		select {
		case err := <-x.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("reconciler did not stop")
		}
	})
}

func startReconciler(t testing.TB, js jetstream.JetStream, store reconcile.Store, mod func(*reconcile.Config)) *running {
	t.Helper()
	cfg := reconcile.DefaultConfig()
	cfg.BatchInterval = 50 * time.Millisecond
	cfg.RetryMin = 20 * time.Millisecond
	cfg.RetryMax = 200 * time.Millisecond
	cfg.Metrics = reconcile.NewMetrics(nil)
	cfg.MaxReportAge = 0 // the tests' reports are of t0, a fixed day in the past
	if mod != nil {
		mod(&cfg)
	}
	r, err := reconcile.New(js, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &running{r: r, m: cfg.Metrics, cancel: cancel, done: make(chan error, 1)}
	go func() { x.done <- r.Run(ctx) }()
	t.Cleanup(func() { x.stop(t) })
	return x
}

// spent returns the ledger's total spent per key.
func spent(t testing.TB, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT key, sum(spent)::bigint FROM usage_reports GROUP BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitSpent waits until the ledger's spent per key equals want.
func waitSpent(t testing.TB, pool *pgxpool.Pool, want map[string]int64, timeout time.Duration) {
	t.Helper()
	testserver.WaitFor(t, timeout, 20*time.Millisecond, func() error {
		got := spentQuiet(pool)
		if len(got) != len(want) {
			return fmt.Errorf("ledger has %d keys, want %d", len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				return fmt.Errorf("key %s: spent %d, want %d", k, got[k], v)
			}
		}
		return nil
	})
}

func spentQuiet(pool *pgxpool.Pool) map[string]int64 {
	out := map[string]int64{}
	rows, err := pool.Query(context.Background(), `SELECT key, sum(spent)::bigint FROM usage_reports GROUP BY key`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int64
		_ = rows.Scan(&k, &n)
		out[k] = n
	}
	return out
}

func val(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Histogram != nil:
		return float64(d.Histogram.GetSampleCount())
	}
	return 0
}

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func rep(key, process string, seq, spentN, leased int64, final bool) ledger.Report {
	return ledger.Report{Key: key, WindowStart: t0, WindowEnd: t0.Add(time.Minute), ProcessID: process, Region: "eu",
		Spent: spentN, Leased: leased, Seq: seq, Final: final, SentAt: t0.Add(time.Duration(seq) * time.Second)}
}
