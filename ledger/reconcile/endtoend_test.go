package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

func newReporter(t testing.TB, js jetstream.JetStream, process string, mod func(*ledger.Config)) (*ledger.Reporter, *ledger.Metrics) {
	t.Helper()
	cfg := ledger.DefaultConfig()
	cfg.ProcessID = process
	cfg.Region = "eu"
	cfg.SpoolDir = t.TempDir()
	cfg.PublishTimeout = 500 * time.Millisecond
	cfg.Metrics = ledger.NewMetrics(nil)
	cfg.AppendIncarnation = false
	if mod != nil {
		mod(&cfg)
	}
	r, err := ledger.NewReporter(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, cfg.Metrics
}

func TestKilledProcessLeavesWindowIncomplete(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	ctx := context.Background()
	start := time.Now().Add(-time.Hour).Truncate(time.Minute).UTC()
	clk := clock.NewManual(start.Add(10 * time.Second))

	killed, _ := newReporter(t, js, "p-killed", func(c *ledger.Config) { c.Clock = clk })
	ok, _ := newReporter(t, js, "p-ok", func(c *ledger.Config) { c.Clock = clk })
	for _, r := range []*ledger.Reporter{killed, ok} {
		r.Record([]region.Usage{{Key: "k", WindowStart: start, Spent: 3, Leased: 4}})
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// p-killed dies here: no more reports, no final. p-ok shuts down cleanly.
	if err := ok.Close(ctx); err != nil {
		t.Fatal(err)
	}
	startReconciler(t, js, reconcile.NewWriter(pool), nil)
	waitSpent(t, pool, map[string]int64{"k": 6}, 20*time.Second)
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		var final bool
		err := pool.QueryRow(ctx, `SELECT final FROM usage_reports WHERE process_id = 'p-ok'`).Scan(&final)
		if err != nil || !final {
			return fmt.Errorf("p-ok final not recorded (%v)", err)
		}
		return nil
	})
	var procs []string
	rows, err := pool.Query(ctx, `SELECT process_id FROM usage_incomplete_windows WHERE key = 'k'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		_ = rows.Scan(&p)
		procs = append(procs, p)
	}
	rows.Close()
	if fmt.Sprint(procs) != "[p-killed]" {
		t.Fatalf("incomplete windows name %v, want [p-killed]", procs)
	}
	var complete, incomplete bool
	if err := pool.QueryRow(ctx, `SELECT complete, incomplete FROM usage_windows WHERE key = 'k'`).Scan(&complete, &incomplete); err != nil {
		t.Fatal(err)
	}
	if complete || !incomplete {
		t.Fatalf("usage_windows: complete=%v incomplete=%v", complete, incomplete)
	}
}

func TestNATSDownWhileReporting(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	srv := testserver.StartNATS(t)
	js := connect(t, srv.URL)
	rjs := connect(t, srv.URL)
	ctx := context.Background()
	rep, m := newReporter(t, js, "p1", func(c *ledger.Config) {
		c.Window = time.Hour
		c.ReportInterval = 20 * time.Millisecond
	})
	rep.Start()
	startReconciler(t, rjs, reconcile.NewWriter(pool), nil)
	w := region.WindowStart("a", time.Now(), time.Hour)
	want := map[string]int64{}
	record := func(n int) {
		for i := range n {
			k := fmt.Sprintf("k%d", i%7)
			rep.Record([]region.Usage{{Key: k, WindowStart: w, Spent: 1, Leased: 1}})
			want[k]++
		}
	}
	record(50)
	waitSpent(t, pool, want, 20*time.Second)

	srv.Stop()
	for range 5 {
		record(30)
		before := val(m.Spooled)
		testserver.WaitFor(t, 10*time.Second, 5*time.Millisecond, func() error {
			if val(m.Spooled) == before {
				return errors.New("nothing spooled yet")
			}
			return nil
		})
	}
	if val(m.SpoolReports) == 0 || val(m.SpoolBytes) == 0 {
		t.Fatalf("spool empty while NATS is down: %v reports", val(m.SpoolReports))
	}
	srv.Restart(t)
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if n := val(m.SpoolReports); n != 0 {
			return fmt.Errorf("spool still holds %v reports", n)
		}
		return nil
	})
	waitSpent(t, pool, want, 30*time.Second)
	record(20)
	if err := rep.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitSpent(t, pool, want, 30*time.Second)
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		var open int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_reports WHERE NOT final`).Scan(&open); err != nil || open != 0 {
			return fmt.Errorf("%d rows without final (%v)", open, err)
		}
		return nil
	})
}

// Several Limiter processes share one store; each has its own Reporter. The
// ledger's spent per key equals the cost of the allowed decisions the
// callers saw, exactly — also when NATS goes away in the middle of the run
// (the reporters spool, then drain).
func TestLedgerSpentEqualsAllowedDecisions(t *testing.T) {
	for _, outage := range []bool{false, true} {
		name := "steady"
		if outage {
			name = "NATS outage mid-run"
		}
		t.Run(name, func(t *testing.T) { testLedgerExact(t, outage) })
	}
}

func testLedgerExact(t *testing.T, natsOutage bool) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	srv := testserver.StartNATS(t)
	ctx := context.Background()
	const (
		processes = 3
		keys      = 6
		window    = 500 * time.Millisecond
	)
	store := memstore.New(nil)
	plans := region.StaticPlans{Default: region.Plan{Rate: 400, Capacity: 40}}
	type proc struct {
		lim    *region.Limiter
		rep    *ledger.Reporter
		m      *ledger.Metrics
		cancel context.CancelFunc
		done   chan error
	}
	var procs []*proc
	for i := range processes {
		rep, m := newReporter(t, connect(t, srv.URL), fmt.Sprintf("p%d", i), func(c *ledger.Config) {
			c.Window = window
			c.ReportInterval = 50 * time.Millisecond
			c.FinalGrace = 100 * time.Millisecond
		})
		cfg := region.DefaultConfig()
		cfg.Region = "eu"
		cfg.Window = window
		cfg.Usage = rep
		cfg.FlushInterval = 20 * time.Millisecond
		cfg.ProcessEstimate = processes
		lim, err := region.New(store, plans, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		p := &proc{lim: lim, rep: rep, m: m, cancel: cancel, done: make(chan error, 1)}
		go func() { p.done <- lim.Run(rctx) }()
		rep.Start()
		procs = append(procs, p)
	}
	startReconciler(t, connect(t, srv.URL), reconcile.NewWriter(pool), nil)

	var allowed [keys]atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(1500 * time.Millisecond)
	for _, p := range procs {
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for time.Now().Before(deadline) {
					k := rng.IntN(keys)
					cost := int64(1 + rng.IntN(3))
					d, err := p.lim.Allow(ctx, fmt.Sprintf("key-%d", k), cost)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						allowed[k].Add(cost)
					}
				}
			}()
		}
	}
	if natsOutage {
		srv.Stop()
		for _, p := range procs {
			testserver.WaitFor(t, 10*time.Second, 5*time.Millisecond, func() error {
				if val(p.m.SpoolReports) == 0 {
					return errors.New("nothing spooled yet")
				}
				return nil
			})
		}
		srv.Restart(t)
		for _, p := range procs {
			testserver.WaitFor(t, 20*time.Second, 10*time.Millisecond, func() error {
				if n := val(p.m.SpoolReports); n != 0 {
					return fmt.Errorf("spool still holds %v reports", n)
				}
				return nil
			})
		}
	}
	wg.Wait()
	// Graceful shutdown: the limiter drains into its reporter, then the
	// reporter sends finals.
	for _, p := range procs {
		p.cancel()
		if err := <-p.done; err != nil {
			t.Fatal(err)
		}
		if err := p.rep.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{}
	for k := range keys {
		if n := allowed[k].Load(); n > 0 {
			want[fmt.Sprintf("key-%d", k)] = n
		}
	}
	waitSpent(t, pool, want, 30*time.Second)
	var open, windows int
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT final), count(DISTINCT (key, window_start)) FROM usage_reports`).Scan(&open, &windows); err != nil {
			return err
		}
		if open != 0 || windows < keys*2 {
			return fmt.Errorf("%d rows without final, %d windows", open, windows)
		}
		return nil
	})
	if got := spent(t, pool); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after finals: %v, want %v", got, want)
	}
	t.Logf("allowed per key %v over %d windows", want, windows)
}
