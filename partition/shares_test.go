package partition

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func sum(ss []Share) int64 {
	var s int64
	for _, x := range ss {
		s += x.Micro
	}
	return s
}

func byName(ss []Share) map[string]int64 {
	m := make(map[string]int64, len(ss))
	for _, s := range ss {
		m[s.Name] = s.Micro
	}
	return m
}

// checkInvariants asserts the invariants every result must keep: sorted by
// name, sum exactly Micro, every floor kept.
func checkInvariants(t *testing.T, in []Region, out []Share) {
	t.Helper()
	if len(out) != len(in) {
		t.Fatalf("got %d shares for %d regions", len(out), len(in))
	}
	if s := sum(out); s != Micro {
		t.Fatalf("shares sum to %d, want %d: %v", s, Micro, out)
	}
	got := byName(out)
	for _, r := range in {
		if got[r.Name] < int64(math.Ceil(r.Floor*Micro-1e-6)) {
			t.Fatalf("region %s share %d below floor %v: %v", r.Name, got[r.Name], r.Floor, out)
		}
	}
	for i := 1; i < len(out); i++ {
		if out[i-1].Name >= out[i].Name {
			t.Fatalf("shares not sorted by name: %v", out)
		}
	}
}

func TestSharesTable(t *testing.T) {
	three := func(d1, d2, d3 float64) []Region {
		return []Region{
			{Name: "eu", Demand: d1, Weight: 0.5, Floor: 0.05},
			{Name: "us", Demand: d2, Weight: 0.3, Floor: 0.05},
			{Name: "ap", Demand: d3, Weight: 0.2, Floor: 0.05},
		}
	}
	tests := []struct {
		name  string
		in    []Region
		p     Params
		want  map[string]int64
		delta int64 // allowed difference per region, micro-shares
	}{
		{"no data gets historical weights", three(0, 0, 0), Params{Prior: 1},
			map[string]int64{"eu": 500000, "us": 300000, "ap": 200000}, 0},
		{"no data, no prior, still historical weights", three(0, 0, 0), Params{},
			map[string]int64{"eu": 500000, "us": 300000, "ap": 200000}, 0},
		{"skew 70/20/10 with negligible prior", three(700, 200, 100), Params{Prior: 0},
			map[string]int64{"eu": 700000, "us": 200000, "ap": 100000}, 0},
		{"quiet region keeps its floor", three(1000, 0, 0), Params{},
			map[string]int64{"eu": 900000, "us": 50000, "ap": 50000}, 0},
		{"floor pins a small region, rest proportional", three(900, 90, 10), Params{},
			map[string]int64{"eu": 863636, "us": 86364, "ap": 50000}, 1},
		{"prior blends toward history", three(10, 0, 0), Params{Prior: 10},
			map[string]int64{"eu": 750000, "us": 150000, "ap": 100000}, 0},
		{"admitted bounds demand from below", []Region{
			{Name: "a", Demand: 1, Admitted: 3, Floor: 0}, {Name: "b", Demand: 1, Floor: 0}}, Params{},
			map[string]int64{"a": 750000, "b": 250000}, 0},
		{"single region gets all", []Region{{Name: "solo", Demand: 5, Floor: 0.05}}, Params{},
			map[string]int64{"solo": Micro}, 0},
		{"thirds round to exactly one", []Region{{Name: "a", Demand: 1}, {Name: "b", Demand: 1}, {Name: "c", Demand: 1}}, Params{},
			map[string]int64{"a": 333334, "b": 333333, "c": 333333}, 0},
		{"floors sum to one", []Region{{Name: "a", Demand: 100, Floor: 0.5}, {Name: "b", Floor: 0.5}}, Params{},
			map[string]int64{"a": 500000, "b": 500000}, 0},
		{"no trust keeps the historical split", three(700, 200, 100), Params{UseTrust: true},
			map[string]int64{"eu": 500000, "us": 300000, "ap": 200000}, 0},
		{"half trust blends the splits", three(700, 200, 100), Params{Trust: 0.5, UseTrust: true},
			map[string]int64{"eu": 600000, "us": 250000, "ap": 150000}, 0},
		{"zero weights are equal weights", []Region{{Name: "a"}, {Name: "b"}}, Params{Prior: 1},
			map[string]int64{"a": 500000, "b": 500000}, 0},
		{"an absurd claim without a cap pins the others", three(900, math.MaxFloat32, 0), Params{},
			map[string]int64{"eu": 50000, "us": 900000, "ap": 50000}, 0},
		{"an absurd claim counts as MaxDemand", three(900, math.MaxFloat32, 0), Params{MaxDemand: 2000},
			map[string]int64{"eu": 294828, "us": 655172, "ap": 50000}, 1},
		{"admitted is capped too", []Region{
			{Name: "a", Demand: 1, Admitted: 1e30, Floor: 0}, {Name: "b", Demand: 10, Floor: 0}}, Params{MaxDemand: 10},
			map[string]int64{"a": 500000, "b": 500000}, 0},
		{"claims under the cap are untouched", three(700, 200, 100), Params{MaxDemand: 700},
			map[string]int64{"eu": 700000, "us": 200000, "ap": 100000}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Shares(tt.in, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, tt.in, out)
			got := byName(out)
			for name, want := range tt.want {
				if d := got[name] - want; d > tt.delta || d < -tt.delta {
					t.Errorf("%s: got %d, want %d±%d (all: %v)", name, got[name], want, tt.delta, out)
				}
			}
		})
	}
}

func TestSharesErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []Region
		p    Params
		want error
	}{
		{"empty name", []Region{{Name: ""}}, Params{}, ErrInvalidInput},
		{"duplicate", []Region{{Name: "a"}, {Name: "a"}}, Params{}, ErrInvalidInput},
		{"negative demand", []Region{{Name: "a", Demand: -1}}, Params{}, ErrInvalidInput},
		{"NaN admitted", []Region{{Name: "a", Admitted: math.NaN()}}, Params{}, ErrInvalidInput},
		{"infinite weight", []Region{{Name: "a", Weight: math.Inf(1)}}, Params{}, ErrInvalidInput},
		{"floor above one", []Region{{Name: "a", Floor: 1.5}}, Params{}, ErrInvalidInput},
		{"negative prior", []Region{{Name: "a"}}, Params{Prior: -1}, ErrInvalidInput},
		{"trust above one", []Region{{Name: "a"}}, Params{Trust: 1.5}, ErrInvalidInput},
		{"negative max demand", []Region{{Name: "a"}}, Params{MaxDemand: -1}, ErrInvalidInput},
		{"infinite max demand", []Region{{Name: "a"}}, Params{MaxDemand: math.Inf(1)}, ErrInvalidInput},
		{"floors too large", []Region{{Name: "a", Floor: 0.6}, {Name: "b", Floor: 0.6}}, Params{}, ErrFloorsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Shares(tt.in, tt.p); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestSharesDeterministicUnderPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		in := randomRegions(rng)
		p := Params{Prior: rng.Float64() * 10}
		want, err := Shares(in, p)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, in, want)
		for k := 0; k < 5; k++ {
			perm := append([]Region(nil), in...)
			rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			got, err := Shares(perm, p)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("permutation changed result: %v vs %v", got, want)
				}
			}
		}
	}
}

func TestSharesMonotoneInDemand(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		in := randomRegions(rng)
		p := Params{Prior: rng.Float64() * 5, Trust: 1, UseTrust: true}
		if trial%2 == 1 {
			p.Trust = rng.Float64()
		}
		i := rng.IntN(len(in))
		before, err := Shares(in, p)
		if err != nil {
			t.Fatal(err)
		}
		more := append([]Region(nil), in...)
		more[i].Demand = more[i].Demand*(1+rng.Float64()) + rng.Float64()*100
		after, err := Shares(more, p)
		if err != nil {
			t.Fatal(err)
		}
		b, a := byName(before)[in[i].Name], byName(after)[in[i].Name]
		// Rounding to whole micro-shares may cost one micro-share.
		if a < b-1 {
			t.Fatalf("raising %s's demand %v→%v lowered its share %d→%d", in[i].Name, in[i].Demand, more[i].Demand, b, a)
		}
		// With full trust, every other region's share may only shrink (or
		// stay). With less, more demand anywhere also raises the historical
		// part of everybody's effective demand, so others may grow a little.
		for name, x := range byName(after) {
			if p.Trust == 1 && name != in[i].Name && x > byName(before)[name]+1 {
				t.Fatalf("raising %s's demand raised %s's share %d→%d", in[i].Name, name, byName(before)[name], x)
			}
		}
	}
}

// TestSharesCappedClaimsKeepABound: with Params.MaxDemand, whatever the
// other regions claim (up to float32's largest rate, what a digest can
// carry), a region with demand d keeps at least
// (1 − Σ floors) · Trust · min(d, MaxDemand) / (n · MaxDemand + Prior) of
// the limit, besides its floor and the usual invariants.
func TestSharesCappedClaimsKeepABound(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 500; trial++ {
		in := randomRegions(rng)
		p := Params{Prior: rng.Float64() * 5, Trust: rng.Float64(), UseTrust: true, MaxDemand: 1 + rng.ExpFloat64()*1000}
		for i := range in {
			if rng.IntN(2) == 0 { // a hostile claim
				in[i].Demand, in[i].Admitted = math.MaxFloat32, rng.Float64()*math.MaxFloat32
			}
		}
		out, err := Shares(in, p)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, in, out)
		var floors float64
		for _, r := range in {
			floors += math.Ceil(r.Floor*Micro-1e-6) / Micro
		}
		got := byName(out)
		for _, r := range in {
			d := math.Min(math.Max(r.Demand, r.Admitted), p.MaxDemand)
			bound := (1 - floors) * p.Trust * d / (float64(len(in))*p.MaxDemand + p.Prior)
			if float64(got[r.Name]) < bound*Micro-1 {
				t.Fatalf("trial %d: %s with demand %v holds %d micro, below the bound %.0f: %+v, %+v", trial, r.Name, d, got[r.Name], bound*Micro, in, p)
			}
		}
	}
}

func randomRegions(rng *rand.Rand) []Region {
	names := []string{"ap", "eu", "us", "sa", "af", "me", "ca"}
	n := 1 + rng.IntN(len(names))
	floor := rng.Float64() / float64(n)
	out := make([]Region, n)
	for i := range out {
		out[i] = Region{Name: names[i], Weight: rng.Float64(), Floor: floor}
		if rng.IntN(3) > 0 {
			out[i].Demand = rng.ExpFloat64() * 1000
		}
		if rng.IntN(3) == 0 {
			out[i].Admitted = rng.Float64() * out[i].Demand
		}
	}
	return out
}

func FuzzShares(f *testing.F) {
	f.Add(700.0, 200.0, 100.0, 0.5, 0.3, 0.2, 0.05, 1.0)
	f.Add(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
	f.Add(1e300, 1e-300, 0.0, 1.0, 0.0, 0.0, 0.33, 0.0)
	f.Fuzz(func(t *testing.T, d1, d2, d3, w1, w2, w3, floor, prior float64) {
		trust := math.Mod(math.Abs(prior), 1)
		in := []Region{
			{Name: "c", Demand: d1, Weight: w1, Floor: floor},
			{Name: "a", Demand: d2, Weight: w2, Floor: floor},
			{Name: "b", Demand: d3, Weight: w3, Floor: floor},
		}
		out, err := Shares(in, Params{Prior: prior, Trust: trust, UseTrust: true})
		if err != nil {
			if !errors.Is(err, ErrInvalidInput) && !errors.Is(err, ErrFloorsTooLarge) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		checkInvariants(t, in, out)
	})
}
