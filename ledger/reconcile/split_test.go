package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// regionReports returns n reports of region, each a new row of its own key.
func regionReports(region string, n int) []ledger.Report {
	out := make([]ledger.Report, n)
	for i := range out {
		r := rep(fmt.Sprintf("%s-key-%06d", region, i), region+"-p1", 1, int64(i%7+1), 10, true)
		r.Region = region
		out[i] = r
	}
	return out
}

// TestReconcilersSplitByRegion: two reconcilers on one stream and one
// ledger, one consuming eu's reports and the other us's and ap's
// (Config.Regions, each its own durable), write every report once: each
// counts only its own regions', and the ledger holds their spent exactly.
// A fourth region's reports wait for a reconciler of theirs.
func TestReconcilersSplitByRegion(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	eu, us, ap, sa := regionReports("eu", 300), regionReports("us", 200), regionReports("ap", 100), regionReports("sa", 50)
	for _, reps := range [][]ledger.Report{eu, us, ap, sa} {
		publish(t, js, "", reps...)
	}

	xeu := startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) {
		c.Regions, c.Durable = []string{"eu"}, "reconciler-eu"
	})
	xus := startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) {
		c.Regions, c.Durable = []string{"us", "ap"}, "reconciler-us-ap"
	})
	want := map[string]int64{}
	for _, reps := range [][]ledger.Report{eu, us, ap} {
		for _, r := range reps {
			want[r.Key] += r.Spent
		}
	}
	waitSpent(t, pool, want, 30*time.Second)
	if n, m := val(xeu.m.Reports), val(xus.m.Reports); n != float64(len(eu)) || m != float64(len(us)+len(ap)) {
		t.Fatalf("reports written: eu's reconciler %v (want %d), us and ap's %v (want %d)", n, len(eu), m, len(us)+len(ap))
	}

	// sa's reports are still in the stream, and only they: the others
	// left it as they were written (work-queue retention). A reconciler
	// of sa's writes them.
	s, err := js.Stream(context.Background(), ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		info, err := s.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Msgs != uint64(len(sa)) {
			return fmt.Errorf("the stream holds %d messages, want sa's %d", info.State.Msgs, len(sa))
		}
		return nil
	})
	xsa := startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) {
		c.Regions, c.Durable = []string{"sa"}, "reconciler-sa"
	})
	for _, r := range sa {
		want[r.Key] += r.Spent
	}
	waitSpent(t, pool, want, 30*time.Second)
	if n := val(xsa.m.Reports); n != float64(len(sa)) {
		t.Fatalf("sa's reconciler wrote %v reports, want %d", n, len(sa))
	}
}

// TestRegionsConfig: a region that is not a subject token, or named twice,
// is refused naming its index.
func TestRegionsConfig(t *testing.T) {
	js := connect(t, testserver.StartNATS(t).URL)
	for _, tc := range []struct {
		regions []string
		want    string
	}{
		{[]string{"eu", "u.s"}, "Regions[1]"},
		{[]string{"eu", ""}, "Regions[1]"},
		{[]string{"eu", "eu"}, "Regions[1]"},
		{[]string{"a>"}, "Regions[0]"},
	} {
		cfg := reconcile.DefaultConfig()
		cfg.Regions = tc.regions
		_, err := reconcile.New(js, reconcile.NewWriter(nil), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want one naming %s", tc.regions, err, tc.want)
		}
	}
}

// BenchmarkIngestSplit measures reports/s from the stream into one
// Postgres with one reconciler for both regions against two, one per
// region (Config.Regions): b.N new rows, half eu's and half us's, are
// published first (not timed) in batches of 1000 reports per message, as
// limiters send them, then the reconcilers drain them. Run with a
// fixed count, e.g.
// go test -run XXX -bench IngestSplit -benchtime 100000x ./ledger/reconcile/
func BenchmarkIngestSplit(b *testing.B) {
	for _, split := range []bool{false, true} {
		name := "one reconciler"
		if split {
			name = "two, by region"
		}
		b.Run(name, func(b *testing.B) {
			db := ledgertest.MigratedDatabase(b)
			pool := migratedPool(b, db)
			js := connect(b, testserver.StartNATS(b).URL)
			half := max(1, b.N/2)
			for _, region := range []string{"eu", "us"} {
				publishBatches(b, js, regionReports(region, half), 1000)
			}
			b.ResetTimer()
			start := time.Now()
			var xs []*running
			if split {
				for _, region := range []string{"eu", "us"} {
					// Each reconciler its own pool, as two processes have.
					p := migratedPool(b, db)
					xs = append(xs, startReconciler(b, js, reconcile.NewWriter(p), func(c *reconcile.Config) {
						c.Regions, c.Durable = []string{region}, "reconciler-"+region
					}))
				}
			} else {
				xs = append(xs, startReconciler(b, js, reconcile.NewWriter(pool), nil))
			}
			testserver.WaitFor(b, 10*time.Minute, 5*time.Millisecond, func() error {
				n := 0.0
				for _, x := range xs {
					n += val(x.m.Reports)
				}
				if n < float64(2*half) {
					return fmt.Errorf("%v of %d reports ingested", n, 2*half)
				}
				return nil
			})
			el := time.Since(start)
			b.StopTimer()
			for _, x := range xs {
				x.stop(b)
			}
			b.ReportMetric(float64(2*half)/el.Seconds(), "reports/s")
		})
	}
}

// publishBatches sends reps (of one region and process) as batch messages
// of up to per reports, as a limiter's reporter does.
func publishBatches(t testing.TB, js jetstream.JetStream, reps []ledger.Report, per int) {
	t.Helper()
	for len(reps) > 0 {
		n := min(len(reps), per)
		body, id, err := ledger.EncodeBatch(reps[:n])
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: ledger.DefaultStreamConfig().Subject(reps[0].Region, reps[0].ProcessID), Data: body, Header: nats.Header{}}
		msg.Header.Set(ledger.HeaderEncoding, ledger.EncodingBatch)
		if _, err := js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
		reps = reps[n:]
	}
}
