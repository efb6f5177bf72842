package multiregion

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestLimitOver(t *testing.T) {
	change := []PlanPhase{{Rate: 50, Capacity: 100}, {From: 5 * time.Second, Rate: 20, Capacity: 40}}
	for _, tc := range []struct {
		name   string
		phases []PlanPhase
		a, b   int
		want   float64
	}{
		{"one second", []PlanPhase{{Rate: 50, Capacity: 100}}, 0, 0, 150},
		{"ten seconds", []PlanPhase{{Rate: 50, Capacity: 100}}, 0, 9, 600},
		{"before the change", change, 0, 4, 350},
		{"after the change", change, 5, 9, 140},
		{"across the change keeps the larger capacity", change, 3, 6, 50 + 50 + 20 + 20 + 100},
		{"a partial last second counts its part", []PlanPhase{{Rate: 50, Capacity: 100}}, 0, 100, 100*50 + 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := limitOver(tc.phases, tc.a, tc.b, 100); got != tc.want {
				t.Fatalf("limitOver = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUnderLimit(t *testing.T) {
	plan := []PlanPhase{{Rate: 10, Capacity: 20}}
	for _, tc := range []struct {
		name   string
		demand []float64
		want   bool
	}{
		{"steady under", []float64{8, 8, 8, 8}, true},
		{"burst within 90 % of capacity", []float64{18, 0, 0}, true},
		{"burst above 90 % of capacity", []float64{19, 0, 0}, false},
		{"steady over", []float64{12, 12, 12, 12, 12}, false},
		{"idle", []float64{0, 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := underLimit(tc.demand, plan); got != tc.want {
				t.Fatalf("underLimit(%v) = %v, want %v", tc.demand, got, tc.want)
			}
		})
	}
}

func TestFaultBound(t *testing.T) {
	spec := DefaultSpec() // 2 processes: floor max(0.02, 0.125) = 0.125, factor 1.125
	plan := []PlanPhase{{Rate: 50, Capacity: 100}}
	for _, tc := range []struct {
		name  string
		fault Fault
		share float64
		want  float64
	}{
		// L = 50 × 6 s (seconds 2..7) + 100 = 400.
		{"slow store", Fault{Region: "eu", From: 2 * time.Second, To: 7 * time.Second}, 0.5, 0.5*1.01*400 + 1.125*0.5*400},
		{"lost store adds the fresh bucket", Fault{Region: "eu", From: 2 * time.Second, To: 7 * time.Second, StoreLost: true}, 0.5,
			0.5*1.01*400 + 1.125*0.5*400 + 0.5*100},
		{"whole limit in one region", Fault{Region: "eu", From: 2 * time.Second, To: 7 * time.Second}, 1, 1.125 * 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := faultBound(spec, tc.fault, plan, tc.share, 100, 100); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("faultBound = %v, want %v", got, tc.want)
			}
		})
	}
	if f := spec.DegradedFloor(); f != 0.125 {
		t.Fatalf("DegradedFloor = %v, want 0.125", f)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

func TestCompareLedger(t *testing.T) {
	allowed := map[string]map[string]int64{"eu-0": {"a": 10, "b": 5}, "eu-1": {"a": 7}}
	degraded := map[string]map[string]int64{"eu-0": {"a": 2}}
	for _, tc := range []struct {
		name    string
		led     Ledger
		crashed map[string]bool
		exact   bool
	}{
		{"exact", Ledger{"eu-0": {"a": {Spent: 10, Degraded: 2}, "b": {Spent: 5}}, "eu-1": {"a": {Spent: 7}}}, nil, true},
		{"short", Ledger{"eu-0": {"a": {Spent: 9, Degraded: 2}, "b": {Spent: 5}}, "eu-1": {"a": {Spent: 7}}}, nil, false},
		{"degraded not flagged", Ledger{"eu-0": {"a": {Spent: 10}, "b": {Spent: 5}}, "eu-1": {"a": {Spent: 7}}}, nil, false},
		{"crashed process may be short", Ledger{"eu-0": {"a": {Spent: 10, Degraded: 2}, "b": {Spent: 5}}, "eu-1": {"a": {Spent: 3}}},
			map[string]bool{"eu-1": true}, true},
		{"empty ledger is not wired", Ledger{}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := compareLedger(allowed, degraded, tc.led, tc.crashed)
			if lc.Exact() != tc.exact {
				t.Fatalf("Exact = %v, want %v (%+v)", lc.Exact(), tc.exact, lc)
			}
		})
	}
}

func TestSpecWeightsFlag(t *testing.T) {
	s := DefaultSpec()
	if got, want := s.weightsFlag(), "ap=0.2,eu=0.5,us=0.3"; got != want {
		t.Fatalf("weightsFlag = %q, want %q", got, want)
	}
	s.Weights = map[string]float64{"eu": 0.5, "us": 0.5, "ap": 0.5}
	if err := s.validate(); err == nil || !strings.Contains(err.Error(), "Weights") {
		t.Fatalf("validate with weights summing to 1.5: %v", err)
	}
}

func TestSVGPlot(t *testing.T) {
	b := string(svgPlot("t", "cost/s", []svgSeries{{Name: "a", Color: "#000", Points: []float64{1, 2, 3}}}, [][2]float64{{0, 1}}))
	for _, want := range []string{"<svg", "<polyline", "</svg>", ">a</text>"} {
		if !strings.Contains(b, want) {
			t.Fatalf("plot lacks %q:\n%s", want, b)
		}
	}
}

func TestZipfAndHotKey(t *testing.T) {
	ks := ZipfKeys("k", 4, 1, 12)
	if ks[0].Rate != 12 || ks[1].Rate != 6 || ks[3].Rate != 3 {
		t.Fatalf("ZipfKeys rates: %+v", ks)
	}
	hot := HotKey("hot", 100, ks)
	if want := 100 * (12 + 6 + 4 + 3) / 4.0; hot.Rate != want {
		t.Fatalf("HotKey rate %v, want %v", hot.Rate, want)
	}
}

func TestHistogramQuantile(t *testing.T) {
	m := Metrics{
		`quota_decision_duration_seconds_bucket{le="0.0001"}`: 90,
		`quota_decision_duration_seconds_bucket{le="0.001"}`:  99,
		`quota_decision_duration_seconds_bucket{le="0.01"}`:   100,
		`quota_decision_duration_seconds_bucket{le="+Inf"}`:   100,
		`quota_decision_duration_seconds_count`:               100,
	}
	b := m.Buckets("quota_decision_duration_seconds")
	for _, tc := range []struct {
		q, bound, est float64
	}{{0.45, 0.0001, 0.00005}, {0.9, 0.0001, 0.0001}, {0.99, 0.001, 0.001}, {0.995, 0.01, 0.0055}} {
		bound, est, n := histogramQuantile(tc.q, b)
		if bound != tc.bound || math.Abs(est-tc.est) > 1e-12 || n != 100 {
			t.Errorf("quantile %v = bound %v est %v (n %v), want %v, %v", tc.q, bound, est, n, tc.bound, tc.est)
		}
	}
	if m.Sum("quota_decision_duration_seconds_count") != 100 || !m.Has("quota_decision_duration_seconds_count") {
		t.Fatal("Sum/Has")
	}
}
