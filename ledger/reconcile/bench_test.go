package reconcile_test

import (
	"fmt"
	"testing"
	"time"

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
			pool := migratedPool(b, testserver.NewDatabase(b))
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
