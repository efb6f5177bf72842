package quotabase_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/quotabase/pgledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/migrations"
)

// ledgerPool migrates the database at url and returns the Server's own
// pool on it (pgledger.NewPool with cfg).
func ledgerPool(t testing.TB, url string, cfg quotabase.Config) *pgxpool.Pool {
	t.Helper()
	if _, err := migrations.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	pool, err := pgledger.NewPool(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// writerPool is a read-write pool for the test's own writes.
func writerPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startServer starts a Server on nc and pool with cfg (its logs
// discarded unless cfg.Logger is set) and stops it when the test ends.
func startServer(t testing.TB, nc *nats.Conn, pool *pgxpool.Pool, cfg quotabase.Config) *quotabase.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := quotabase.NewServer(nc, pgledger.New(pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	// The subscription is on the server once a round trip has passed.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return srv
}

func newClient(t testing.TB, nc *nats.Conn, timeout time.Duration) *quotabase.Client {
	t.Helper()
	cfg := quotabase.DefaultClientConfig()
	if timeout > 0 {
		cfg.Timeout = timeout
	}
	c, err := quotabase.NewClient(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// report is one final ledger row.
func report(key, region, process string, window time.Time, spent, refunded, charged int64) ledger.Report {
	return ledger.Report{
		Key: key, Region: region, ProcessID: process,
		WindowStart: window, WindowEnd: window.Add(time.Minute),
		Spent: spent, Leased: spent, Refunded: refunded, Charged: charged,
		Final: true, Seq: 1, SentAt: window.Add(time.Minute),
	}
}

func write(t testing.TB, pool *pgxpool.Pool, reps []ledger.Report) {
	t.Helper()
	if _, err := reconcile.NewWriter(pool).Write(context.Background(), reps); err != nil {
		t.Fatalf("write the ledger: %v", err)
	}
}

// natsServer is an in-process NATS server for the test.
func natsServer(t testing.TB) string { return testserver.StartNATS(t).URL }
