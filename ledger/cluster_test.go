package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/catalogtest"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/limit"
)

// On one region's NATS of three servers, the usage stream and the
// catalogue bucket are created with 3 replicas placed in the region's
// cluster. When the server leading the usage stream goes, a Reporter's
// reports are still acknowledged, a catalogue write by the control plane
// still reaches another process's catalogue, and the reconciler still
// writes usage into Postgres. The Reporter, the reconciler and the reading
// catalogue were connected to the lost server, so they fail over too; and a
// process with lower settings starting afterwards downgrades nothing. The
// server is shut down in-process (JetStreamCluster.Stop), so the raft
// groups it led step down first: failover without an election timeout.
// The reading catalogue may take up to ~5 s to see writes again (the watch
// stops its old consumer with a synchronous delete the lost server never
// answers), and the control plane's own watch up to its WriteTimeout.
func TestReplicatedStreamAndBucketOutliveALostServer(t *testing.T) {
	_, pool := ledgertest.Database(t)
	cl := testserver.StartJetStreamCluster(t, "eu", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	setup := connectOrdered(t, cl, -1)
	scfg := ledger.DefaultStreamConfig()
	scfg.Replicas, scfg.Cluster, scfg.MaxBytes = 3, cl.Name(), 64<<20
	var stream jetstream.Stream
	testserver.WaitFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		var err error
		stream, err = ledger.EnsureStream(ctx, setup, scfg)
		return err
	})
	checkPlaced(t, stream.CachedInfo(), cl.Name())
	var lost int
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if lost = cl.StreamLeader(ledger.DefaultStream); lost < 0 {
			return errors.New("the usage stream has no leader yet")
		}
		return nil
	})

	// The control plane writes the catalogue through a surviving server;
	// a reading process is on the server that will go.
	survivor := (lost + 1) % cl.Size()
	quiet := slog.New(slog.DiscardHandler)
	ccfg := catalog.DefaultConfig()
	ccfg.Replicas, ccfg.Cluster = 3, cl.Name()
	ccfg.RetryInterval, ccfg.WriteTimeout, ccfg.Logger = 50*time.Millisecond, 3*time.Second, quiet
	writer := catalogtest.Start(t, connectOrdered(t, cl, survivor), ccfg)
	rcfg := ccfg
	rcfg.ReadOnly = true
	reader := catalogtest.Start(t, connectOrdered(t, cl, lost), rcfg)
	kvs, err := setup.Stream(ctx, "KV_"+ccfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	checkPlaced(t, kvs.CachedInfo(), cl.Name())

	rep, metrics := ledgertest.Reporter(t, connectOrdered(t, cl, lost), "eu-1", func(c *ledger.Config) {
		c.Stream, c.PublishTimeout = scfg, time.Second
	})
	rec := ledgertest.StartReconciler(t, connectOrdered(t, cl, lost), pool, scfg)

	// Everything works with three servers.
	window := time.Now().UTC().Truncate(time.Minute)
	rep.Record([]limit.Usage{{Key: "k-before", WindowStart: window, Spent: 5}})
	ledgertest.FlushAcked(t, rep, metrics, 1)
	putPlan(t, writer, limit.Plan{Name: "pro", Rate: 10, Capacity: 20})
	if _, err := writer.Assign(ctx, "admin", "acct_1", "pro"); err != nil {
		t.Fatal(err)
	}
	waitPlan(t, reader, limit.Plan{Name: "pro", Rate: 10, Capacity: 20})
	waitLedger(t, pool, map[string]int64{"k-before": 5})

	// The stream's leader goes.
	start := time.Now()
	cl.Stop(lost)
	t.Logf("stopped %s-%d, the usage stream's leader", cl.Name(), lost)

	rep.Record([]limit.Usage{{Key: "k-after", WindowStart: window, Spent: 7}})
	ledgertest.FlushAcked(t, rep, metrics, 2)
	t.Logf("report acknowledged %v after the loss", time.Since(start).Round(time.Millisecond))
	putPlan(t, writer, limit.Plan{Name: "pro", Rate: 30, Capacity: 60})
	waitPlan(t, reader, limit.Plan{Name: "pro", Rate: 30, Capacity: 60})
	t.Logf("catalogue write applied by the reader %v after the loss", time.Since(start).Round(time.Millisecond))
	waitLedger(t, pool, map[string]int64{"k-before": 5, "k-after": 7})
	t.Logf("usage in Postgres %v after the loss", time.Since(start).Round(time.Millisecond))
	if l := cl.StreamLeader(ledger.DefaultStream); l == lost || l < 0 {
		t.Fatalf("usage stream leader after the loss: %d", l)
	}
	if err := rec.Ready(); err != nil {
		t.Fatalf("reconciler not ready after the loss: %v", err)
	}

	// A process with the defaults (one replica, no placement) and the
	// stream's limits starting now leaves the stream as it is, and says so
	// once.
	var logs testserver.LogBuffer
	low := ledger.DefaultStreamConfig()
	low.MaxBytes = scfg.MaxBytes
	low.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s, err := ledger.EnsureStream(ctx, connectOrdered(t, cl, survivor), low)
	if err != nil {
		t.Fatal(err)
	}
	checkPlaced(t, s.CachedInfo(), cl.Name())
	if !strings.Contains(logs.String(), "replicas 3 (this process's setting: 1)") {
		t.Fatalf("the difference was not logged: %q", logs.String())
	}
}

// checkPlaced fails unless the stream has 3 replicas placed in cluster.
func checkPlaced(t *testing.T, info *jetstream.StreamInfo, cluster string) {
	t.Helper()
	c := info.Config
	if c.Replicas != 3 || c.Placement == nil || c.Placement.Cluster != cluster {
		t.Fatalf("stream %s: replicas %d, placement %+v; want 3 in %s", c.Name, c.Replicas, c.Placement, cluster)
	}
	if info.Cluster == nil || info.Cluster.Name != cluster || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream %s: cluster %+v; want a leader and 2 replicas in %s", c.Name, info.Cluster, cluster)
	}
}

// connectOrdered connects to every server of cl, first to server first
// (any, when first < 0), failing over to the others.
func connectOrdered(t *testing.T, cl *testserver.JetStreamCluster, first int) jetstream.JetStream {
	t.Helper()
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	urls := cl.URLs()
	if first >= 0 {
		others := strings.Split(urls, ",")
		urls = strings.Join(append([]string{cl.Server(first).URL}, append(others[:first:first], others[first+1:]...)...), ",")
		opts = append(opts, nats.DontRandomize())
	}
	nc, err := nats.Connect(urls, opts...)
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

// putPlan writes plan "pro", retrying while the bucket's group elects a
// leader.
func putPlan(t *testing.T, c *catalog.Catalog, p limit.Plan) {
	t.Helper()
	testserver.WaitFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.PutPlan(ctx, "admin", "pro", p)
		return err
	})
}

func waitPlan(t *testing.T, c *catalog.Catalog, want limit.Plan) {
	t.Helper()
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		got, err := c.Plan("acct_1")
		if err != nil || got != want {
			return fmt.Errorf("reader's plan of acct_1: %+v, %v; want %+v", got, err, want)
		}
		return nil
	})
}

// waitLedger waits until Postgres holds want as each key's spent usage.
func waitLedger(t *testing.T, pool *pgxpool.Pool, want map[string]int64) {
	t.Helper()
	testserver.WaitFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		rows, err := pool.Query(context.Background(), `SELECT key, sum(spent)::bigint FROM usage_reports GROUP BY key`)
		if err != nil {
			return err
		}
		got, err := pgxCollect(rows)
		if err != nil {
			return err
		}
		for k, v := range want {
			if got[k] != v {
				return fmt.Errorf("ledger has %v, want %v", got, want)
			}
		}
		return nil
	})
}

func pgxCollect(rows pgx.Rows) (map[string]int64, error) {
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}
