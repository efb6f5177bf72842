package multiregion

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSoak is `make soak`: QUOTA_SOAK is the load's duration (e.g. 10m);
// QUOTA_SOAK_KEYS (default 100000) and QUOTA_SOAK_RATE (checks/s, default
// 2000) size it, and QUOTA_SOAK_REPORT names the report file. One limiter
// with its own Redis serves the load (its region's pair stands idle, so
// that the usual two-region wiring, gateways and shares, is what soaks),
// the reconciler writes the ledger, and the test fails when the ledger
// differs from what the clients saw allowed, key by key, or the limiter's
// heap in use grows by more than half from the first third of the run to
// the last.
func TestSoak(t *testing.T) {
	v := os.Getenv("QUOTA_SOAK")
	if v == "" || testing.Short() {
		t.Skip("soak: set QUOTA_SOAK to a duration (make soak runs 10m)")
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		t.Fatalf("QUOTA_SOAK=%q: want a duration of at least 1m", v)
	}
	s := Soak{Keys: envInt(t, "QUOTA_SOAK_KEYS", 100000), Rate: float64(envInt(t, "QUOTA_SOAK_RATE", 2000)),
		Duration: d, Sample: max(10*time.Second, d/30), Workers: 16}

	spec := DefaultSpec()
	spec.Regions = []string{"eu", "us"}
	spec.Weights = map[string]float64{"eu": 0.5, "us": 0.5}
	spec.Processes = 1
	spec.CrossRegionRTT = 20 * time.Millisecond
	spec.Window = time.Minute // the daemon's defaults
	spec.ReportInterval = 5 * time.Second
	c := Start(t, spec)
	c.SetPlan("default", 1e6, 1e6) // every check allowed: the ledger must hold them all
	c.WaitPlan(30*time.Second, 1e6, 1e6, "soak-000000")

	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	res := c.RunSoak(ctx, c.Node("eu", 0), s)
	if p := os.Getenv("QUOTA_SOAK_REPORT"); p != "" {
		if err := res.WriteReport(p); err != nil {
			t.Error(err)
		}
	}
	t.Logf("soak: %d checks, %d errors, ledger settled %v after %v", res.Checks, res.Errors, res.Settled, res.LedgerLag)
	if !res.Settled {
		t.Errorf("ledger differs from the clients' allowed checks: %v", res.Mismatch)
	}
	if res.Errors > res.Checks/1000 {
		t.Errorf("%d of %d checks failed (first: %s)", res.Errors, res.Checks, res.FirstErr)
	}
	if res.Checks < int64(0.8*s.Rate*d.Seconds()) {
		t.Errorf("only %d checks sent, want about %.0f: the load did not keep its rate", res.Checks, s.Rate*d.Seconds())
	}
	first, last := res.memoryDrift()
	if first == 0 || last > 1.5*first {
		t.Errorf("limiter heap in use grew from %.1f MiB (first third) to %.1f MiB (last third)", first/(1<<20), last/(1<<20))
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
