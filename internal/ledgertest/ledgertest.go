// Package ledgertest runs the ledger's real parts for tests: a migrated
// database of its own, a Reporter publishing to JetStream and a Reconciler
// writing into Postgres, each stopped when the test ends, and waits on what
// they have done. It is for tests only.
package ledgertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/migrations"
)

// Database creates a migrated database of the test's own on the Postgres of
// make test (MigratedDatabase) and returns its URL and a pool on it, closed
// when the test ends.
func Database(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	url := MigratedDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return url, pool
}

// Reporter starts a Reporter of region eu as process on js, with its spool
// in a temporary directory, fresh metrics and a publish timeout of 2 s,
// after tune (when not nil) has changed its config. It is closed when the
// test ends.
func Reporter(t testing.TB, js jetstream.JetStream, process string, tune func(*ledger.Config)) (*ledger.Reporter, *ledger.Metrics) {
	t.Helper()
	cfg := ledger.DefaultConfig()
	cfg.Region, cfg.ProcessID, cfg.AppendIncarnation = "eu", process, false
	cfg.SpoolDir = t.TempDir()
	cfg.PublishTimeout = 2 * time.Second
	cfg.Metrics = ledger.NewMetrics(nil)
	if tune != nil {
		tune(&cfg)
	}
	rep, err := ledger.NewReporter(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rep.Close(ctx); err != nil {
			t.Errorf("Reporter.Close: %v", err)
		}
	})
	return rep, cfg.Metrics
}

// FlushAcked flushes rep until JetStream has acknowledged at least
// published reports since it started and none waits in the spool or in
// memory.
func FlushAcked(t testing.TB, rep *ledger.Reporter, m *ledger.Metrics, published float64) {
	t.Helper()
	testserver.WaitFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := rep.Flush(ctx); err != nil {
			return err
		}
		p, spooled, unreported := MetricValue(m.Published), MetricValue(m.SpoolReports), MetricValue(m.Unacknowledge)
		if p < published || spooled > 0 || unreported > 0 {
			return fmt.Errorf("%v reports acknowledged (want %v), %v in the spool, %v windows unreported", p, published, spooled, unreported)
		}
		return nil
	})
}

// MetricValue reads a counter or a gauge; -1 when it cannot.
func MetricValue(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return -1
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.GetGauge().GetValue()
}

// StartReconciler runs a Reconciler from js into pool, on the stream scfg
// describes, with short batch, ack and retry intervals, until the test
// ends; it fails the test if Run fails or does not stop.
func StartReconciler(t testing.TB, js jetstream.JetStream, pool *pgxpool.Pool, scfg ledger.StreamConfig) *reconcile.Reconciler {
	t.Helper()
	cfg := reconcile.DefaultConfig()
	cfg.Stream = scfg
	cfg.BatchInterval, cfg.AckWait = 50*time.Millisecond, 2*time.Second
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	r, err := reconcile.New(js, reconcile.NewWriter(pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("reconciler Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the reconciler did not stop")
		}
	})
	return r
}

// MigratedDatabase creates a database of the test's own on the Postgres of
// make test, with every migration applied, and returns its URL; it is
// dropped when the test ends. It is a copy of a template migrated once per
// server and set of migrations (testserver.NewDatabaseFrom), named by a
// hash of the migration files, so that a changed migration gets a new one.
func MigratedDatabase(t testing.TB) string {
	t.Helper()
	templateOnce.Do(func() { templateName, templateErr = migratedTemplateName() })
	if templateErr != nil {
		t.Fatal(templateErr)
	}
	return testserver.NewDatabaseFrom(t, templateName, func(ctx context.Context, url string) error {
		_, err := migrations.Migrate(ctx, url)
		return err
	})
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// migratedTemplateName is quota_migrated_ and the first 16 hex digits of
// the SHA-256 of every migration file's name and content.
func migratedTemplateName() (string, error) {
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return "", fmt.Errorf("ledgertest: list migrations: %w", err)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		b, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			return "", fmt.Errorf("ledgertest: read migration %s: %w", f, err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	return "quota_migrated_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}
