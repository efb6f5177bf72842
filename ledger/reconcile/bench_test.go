package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// BenchmarkIngest measures reports/s from the stream into Postgres: b.N
// reports are published first (not timed), then one reconciler drains them.
// "new rows": every report is a new (key, window, process) row; "updates":
// ten cumulative reports per row. Run with a fixed count, e.g.
// go test -run XXX -bench Ingest -benchtime 200000x ./ledger/reconcile/
func BenchmarkIngest(b *testing.B) {
	for _, perRow := range []int{1, 10} {
		name := "new rows"
		if perRow > 1 {
			name = "updates"
		}
		b.Run(name, func(b *testing.B) {
			pool := migratedPool(b, ledgertest.MigratedDatabase(b))
			js := connect(b, testserver.StartNATS(b).URL)
			rows := max(1, b.N/perRow)
			reps := make([]ledger.Report, 0, 10000)
			sent := 0
			for s := 1; sent < b.N; s++ {
				for i := 0; i < rows && sent < b.N; i++ {
					reps = append(reps, rep(fmt.Sprintf("key-%07d", i), "p1", int64(s), int64(s), int64(s), s == perRow))
					sent++
					if len(reps) == cap(reps) {
						publish(b, js, "", reps...)
						reps = reps[:0]
					}
				}
			}
			publish(b, js, "", reps...)
			b.ResetTimer()
			start := time.Now()
			x := startReconciler(b, js, reconcile.NewWriter(pool), nil)
			testserver.WaitFor(b, 10*time.Minute, 5*time.Millisecond, func() error {
				if n := val(x.m.Reports); n < float64(b.N) {
					return fmt.Errorf("%v of %d reports ingested", n, b.N)
				}
				return nil
			})
			el := time.Since(start)
			b.StopTimer()
			x.stop(b)
			b.ReportMetric(float64(b.N)/el.Seconds(), "reports/s")
		})
	}
}

// BenchmarkWrite measures the Writer alone, rows/s into Postgres: b.N rows
// in batches of 5000 (the reconciler's default BatchSize), split between
// one or two Writers that each have their own pool and write at the same
// time (two reconcilers on one Postgres), each Writer writing a batch in
// one transaction (parallel=1) or in two key ranges at once (parallel=2,
// WriterConfig's default). Keys are spread over the key space, as
// customers' keys are. "new rows": every row is inserted; "updates": every
// row exists (written before the timer) and takes a newer cumulative
// report. Run with a fixed count, e.g.
// go test -run XXX -bench 'Write$' -benchtime 200000x ./ledger/reconcile/
func BenchmarkWrite(b *testing.B) {
	const batch = 5000
	for _, mode := range []string{"new rows", "updates"} {
		for _, wp := range [][2]int{{1, 1}, {1, 2}, {2, 1}, {2, 2}} {
			writers, parallel := wp[0], wp[1]
			b.Run(fmt.Sprintf("%s/writers=%d/parallel=%d", mode, writers, parallel), func(b *testing.B) {
				url := ledgertest.MigratedDatabase(b)
				pools := []*pgxpool.Pool{migratedPool(b, url)}
				for len(pools) < writers {
					pools = append(pools, migratedPool(b, url))
				}
				// Writer w writes rows w, w+writers, w+2·writers, …
				work := make([][][]ledger.Report, writers)
				for i := 0; i < b.N; i += batch {
					var reps []ledger.Report
					for j := i; j < min(i+batch, b.N); j++ {
						// A multiplicative hash spreads consecutive rows
						// over the key space.
						reps = append(reps, rep(fmt.Sprintf("acct-%08x", uint32(j)*2654435761), "p1", 2, 2, 2, false))
					}
					w := (i / batch) % writers
					work[w] = append(work[w], reps)
				}
				ctx := context.Background()
				if mode == "updates" {
					for w, batches := range work {
						for _, reps := range batches {
							old := make([]ledger.Report, len(reps))
							for i, r := range reps {
								r.Seq, r.Spent, r.Leased = 1, 1, 1
								old[i] = r
							}
							if _, err := reconcile.NewWriter(pools[w]).Write(ctx, old); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				wcfg := reconcile.DefaultWriterConfig()
				wcfg.Parallel = parallel
				b.ResetTimer()
				start := time.Now()
				errs := make(chan error, writers) // one result per writer
				for w := range writers {
					go func() {
						wr, err := reconcile.NewWriterWithConfig(pools[w], wcfg)
						if err != nil {
							errs <- err
							return
						}
						for _, reps := range work[w] {
							if _, err := wr.Write(ctx, reps); err != nil {
								errs <- err
								return
							}
						}
						errs <- nil
					}()
				}
				for range writers {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "rows/s")
			})
		}
	}
}
