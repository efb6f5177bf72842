package partition

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestEWMA(t *testing.T) {
	tests := []struct {
		name              string
		prev, sample      float64
		elapsed, halfLife time.Duration
		want              float64
	}{
		{"one half-life halves the gap", 0, 100, time.Second, time.Second, 50},
		{"two half-lives", 0, 100, 2 * time.Second, time.Second, 75},
		{"no time passed", 10, 100, 0, time.Second, 10},
		{"no smoothing", 10, 100, time.Second, 0, 100},
		{"steady input stays", 42, 42, 3 * time.Second, time.Second, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EWMA(tt.prev, tt.sample, tt.elapsed, tt.halfLife); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHold(t *testing.T) {
	tests := []struct {
		name                      string
		published, candidate, thr float64
		want                      float64
	}{
		{"within threshold keeps", 100, 108, 0.1, 100},
		{"below within threshold keeps", 100, 91, 0.1, 100},
		{"beyond threshold moves", 100, 111, 0.1, 111},
		{"from zero moves", 0, 5, 0.1, 5},
		{"tiny becomes zero", 100, 0.0001, 0.1, 0},
		{"zero stays zero", 0, 0, 0.1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Hold(tt.published, tt.candidate, tt.thr, 0.001); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSmoothedSharesDoNotFlap drives EWMA + Hold + Shares with noisy demand
// around a fixed 70/20/10 split and checks that the shares never change
// after settling, then that a real shift moves them within a few steps.
func TestSmoothedSharesDoNotFlap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	names := []string{"ap", "eu", "us"}
	level := []float64{100, 700, 200}
	ewma := make([]float64, 3)
	pub := make([]float64, 3)
	const step, half = time.Second, 3 * time.Second
	shares := func() []Share {
		in := make([]Region, 3)
		for i := range in {
			in[i] = Region{Name: names[i], Demand: pub[i], Weight: 1, Floor: 0.05}
		}
		out, err := Shares(in, Params{Prior: 1})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tick := func(noise float64) []Share {
		for i := range ewma {
			sample := level[i] * (1 + noise*(2*rng.Float64()-1))
			ewma[i] = EWMA(ewma[i], sample, step, half)
			pub[i] = Hold(pub[i], ewma[i], 0.1, 0.01)
		}
		return shares()
	}
	for i := 0; i < 20; i++ { // settle
		tick(0)
	}
	// ±10 % noise per sample: the published demand (and so the shares)
	// may step once or twice while it finds its place in the hysteresis
	// band, but must not follow the noise.
	prev, changes := shares(), 0
	for i := 0; i < 500; i++ {
		got := tick(0.1)
		for j := range got {
			if got[j] != prev[j] {
				changes++
				break
			}
		}
		prev = got
	}
	if changes > 3 {
		t.Fatalf("noise moved the shares %d times in 500 steps", changes)
	}
	// Demand moves from eu to ap: shares follow within 10 steps.
	level = []float64{700, 100, 200}
	var got []Share
	for i := 0; i < 10; i++ {
		got = tick(0)
	}
	if m := byName(got); m["ap"] < 600000 || m["eu"] > 200000 {
		t.Fatalf("shares did not follow demand: %v", got)
	}
}

func TestWeights(t *testing.T) {
	tests := []struct {
		name                string
		configured, learned []float64
		prior               float64
		want                []float64
	}{
		{"cold start uses configured", []float64{5, 3, 2}, []float64{0, 0, 0}, 10, []float64{0.5, 0.3, 0.2}},
		{"no configuration is equal", []float64{0, 0}, nil, 10, []float64{0.5, 0.5}},
		{"learned blends in", []float64{1, 1}, []float64{30, 0}, 10, []float64{35.0 / 40, 5.0 / 40}},
		{"learned dominates", []float64{1, 0}, []float64{0, 1e9}, 1, []float64{1 / (1e9 + 1), 1e9 / (1e9 + 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Weights(tt.configured, tt.learned, tt.prior)
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestBandInvariants: banded weights sum to 1, each lies within
// [c/factor, c·factor] of its configured weight (to rounding), weights
// already inside the band are left as they are, and an absurd learned
// weight cannot push another region below c/factor.
func TestBandInvariants(t *testing.T) {
	tests := []struct {
		name                string
		weights, configured []float64
		factor              float64
		want                []float64 // nil: only the invariants
	}{
		{"inside the band unchanged", []float64{0.6, 0.25, 0.15}, []float64{0.5, 0.3, 0.2}, 2, []float64{0.6, 0.25, 0.15}},
		{"an absurd weight is capped", []float64{1e-30, 1, 1e-30}, []float64{0.5, 0.3, 0.2}, 2, []float64{0.25, 0.6, 0.15}},
		{"equal configured", []float64{0.98, 0.01, 0.01}, []float64{0, 0, 0}, 2, nil},
		{"factor 1 is the configured weights", []float64{0.9, 0.1}, []float64{1, 1}, 1, []float64{0.5, 0.5}},
		{"zero weights sit at their floors", []float64{1, 0, 0}, []float64{1, 1, 1}, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Band(tt.weights, tt.configured, tt.factor)
			checkBand(t, got, tt.configured, tt.factor)
			for i, w := range tt.want {
				if math.Abs(got[i]-w) > 1e-9 {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 500; trial++ {
		n := 1 + rng.IntN(6)
		w, c := make([]float64, n), make([]float64, n)
		for i := range w {
			w[i], c[i] = rng.ExpFloat64(), rng.Float64()
			if rng.IntN(3) == 0 {
				w[i] = math.MaxFloat32 // a hostile total
			}
		}
		f := 1 + rng.Float64()*5
		checkBand(t, Band(Weights(c, w, rng.Float64()*100), c, f), c, f)
	}
}

// checkBand asserts that got sums to 1 and, for factor > 0, lies in the
// band of configured.
func checkBand(t *testing.T, got, configured []float64, factor float64) {
	t.Helper()
	var s float64
	for _, w := range got {
		s += w
	}
	if math.Abs(s-1) > 1e-9 {
		t.Fatalf("weights %v sum to %v", got, s)
	}
	if factor <= 0 {
		return
	}
	c := Weights(configured, nil, 1)
	for i, w := range got {
		lo, hi := c[i]/max(factor, 1), c[i]*max(factor, 1)
		if w < lo-1e-9 || w > hi+1e-9 {
			t.Fatalf("weight %d = %v outside [%v, %v]: %v", i, w, lo, hi, got)
		}
	}
}
