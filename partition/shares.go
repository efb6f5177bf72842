package partition

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Micro is the whole of a key's limit in micro-shares. Shares sum to exactly
// Micro.
const Micro = 1_000_000

// Errors returned by Shares.
var (
	// ErrInvalidInput: a region's name is empty or repeated, or a number is
	// negative, NaN or infinite.
	ErrInvalidInput = errors.New("partition: invalid input")
	// ErrFloorsTooLarge: the floors add up to more than the whole limit.
	ErrFloorsTooLarge = errors.New("partition: floors sum to more than 1")
)

// Region is one region's input for one key. Rates are in cost units per
// second; only their ratios matter.
type Region struct {
	// Name identifies the region; shares are ordered by it.
	Name string
	// Demand is the smoothed demand (spent + rejected), ≥ 0.
	Demand float64
	// Admitted is the smoothed admitted cost (spent), ≥ 0. It is a lower
	// bound of demand: the larger of the two is used.
	Admitted float64
	// Weight is the region's historical weight, ≥ 0. Weights are
	// normalised over the regions given; all zero means equal weights.
	Weight float64
	// Floor is the smallest share the region may get, in [0, 1].
	Floor float64
}

// Params tunes Shares.
type Params struct {
	// Prior is a pseudo-demand in cost units per second, spread across
	// regions by historical weight and added to their demand. With no
	// demand a key gets the historical weights; with demand much larger
	// than Prior it follows demand. Must be ≥ 0; 0 means a key with no
	// demand anywhere still gets the historical weights.
	Prior float64
	// Trust in [0, 1] is how far the key's demand split is trusted over the
	// historical weights: the effective demand is Trust × demand +
	// (1 − Trust) × total demand × weight. 1 follows demand alone; 0 keeps
	// the historical split whatever the demand. A new key's first samples
	// are noisy, so callers ramp Trust up with the key's age. The zero value
	// is treated as 1 unless UseTrust is set.
	Trust float64
	// UseTrust makes a zero Trust mean "historical weights only".
	UseTrust bool
	// MaxDemand, when positive, caps each region's max(Demand, Admitted),
	// in cost units per second, before anything else: a region claiming
	// more counts as claiming MaxDemand. Demand is self-reported, so
	// without a cap one claim of an absurd rate pins every other region
	// at its floor; with it, a region r with demand d_r keeps at least
	// (1 − Σ floors) · Trust · min(d_r, MaxDemand) / (n · MaxDemand + Prior)
	// of the limit whatever the others claim (n regions). 0 means no cap.
	MaxDemand float64
}

// Share is one region's share of a key's limit.
type Share struct {
	Name  string
	Micro int64 // share × Micro; the shares of one call sum to Micro
}

// Fraction returns the share as a fraction of the whole limit.
func (s Share) Fraction() float64 { return float64(s.Micro) / Micro }

// Shares returns each region's share of one key's limit, sorted by region
// name. Every share is at least its floor (rounded up to a whole
// micro-share), and the shares sum to exactly Micro. The order of regions
// does not matter.
func Shares(regions []Region, p Params) ([]Share, error) {
	if len(regions) == 0 {
		return nil, nil
	}
	if err := check(regions, p); err != nil {
		return nil, err
	}
	rs := make([]Region, len(regions))
	copy(rs, regions)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	for i := 1; i < len(rs); i++ {
		if rs[i].Name == rs[i-1].Name {
			return nil, fmt.Errorf("%w: region %q appears twice", ErrInvalidInput, rs[i].Name)
		}
	}

	floors := make([]int64, len(rs))
	var floorSum int64
	for i, r := range rs {
		floors[i] = int64(math.Ceil(r.Floor*Micro - 1e-6))
		floorSum += floors[i]
	}
	if floorSum > Micro {
		return nil, fmt.Errorf("%w: %d micro-shares", ErrFloorsTooLarge, floorSum)
	}

	weights := normalise(rs)
	trust := 1.0
	if p.UseTrust || p.Trust != 0 {
		trust = p.Trust
	}
	demand := func(r Region) float64 {
		d := math.Max(r.Demand, r.Admitted)
		if p.MaxDemand > 0 {
			d = math.Min(d, p.MaxDemand)
		}
		return d
	}
	var total float64
	for _, r := range rs {
		total += demand(r)
	}
	eff := make([]float64, len(rs))
	var effSum float64
	for i, r := range rs {
		d := demand(r)
		eff[i] = trust*d + (1-trust)*total*weights[i] + p.Prior*weights[i]
		effSum += eff[i]
	}
	if effSum == 0 || math.IsInf(effSum, 0) || math.IsNaN(effSum) {
		copy(eff, weights)
	}
	frac := waterFill(eff, floors)
	micro := roundShares(frac, floors)
	out := make([]Share, len(rs))
	for i, r := range rs {
		out[i] = Share{Name: r.Name, Micro: micro[i]}
	}
	return out, nil
}

func check(regions []Region, p Params) error {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	if bad(p.Trust) || p.Trust > 1 {
		return fmt.Errorf("%w: Trust must be in [0, 1], got %v", ErrInvalidInput, p.Trust)
	}
	if bad(p.Prior) {
		return fmt.Errorf("%w: Prior must be a finite number ≥ 0, got %v", ErrInvalidInput, p.Prior)
	}
	if bad(p.MaxDemand) {
		return fmt.Errorf("%w: MaxDemand must be a finite number ≥ 0, got %v", ErrInvalidInput, p.MaxDemand)
	}
	for _, r := range regions {
		switch {
		case r.Name == "":
			return fmt.Errorf("%w: region Name is empty", ErrInvalidInput)
		case bad(r.Demand):
			return fmt.Errorf("%w: region %q Demand must be a finite number ≥ 0, got %v", ErrInvalidInput, r.Name, r.Demand)
		case bad(r.Admitted):
			return fmt.Errorf("%w: region %q Admitted must be a finite number ≥ 0, got %v", ErrInvalidInput, r.Name, r.Admitted)
		case bad(r.Weight):
			return fmt.Errorf("%w: region %q Weight must be a finite number ≥ 0, got %v", ErrInvalidInput, r.Name, r.Weight)
		case bad(r.Floor) || r.Floor > 1:
			return fmt.Errorf("%w: region %q Floor must be in [0, 1], got %v", ErrInvalidInput, r.Name, r.Floor)
		}
	}
	return nil
}

// normalise returns the regions' weights scaled to sum to 1 (equal weights
// when they are all zero).
func normalise(rs []Region) []float64 {
	w := make([]float64, len(rs))
	var sum float64
	for _, r := range rs {
		sum += r.Weight
	}
	for i, r := range rs {
		if sum > 0 && !math.IsInf(sum, 0) {
			w[i] = r.Weight / sum
		} else {
			w[i] = 1 / float64(len(rs))
		}
	}
	return w
}

// waterFill returns s_i = max(f_i, λ·e_i) with Σ s_i = 1, for floors given in
// micro-shares whose sum is at most Micro. Regions whose proportional share
// falls below their floor are pinned at it, and λ is recomputed over the
// rest until no more regions are pinned (at most len(e) rounds).
func waterFill(e []float64, floors []int64) []float64 {
	n := len(e)
	pinned := make([]bool, n)
	s := make([]float64, n)
	for round := 0; round <= n; round++ {
		var rest, free float64 = 1, 0
		for i := range e {
			if pinned[i] {
				rest -= float64(floors[i]) / Micro
			} else {
				free += e[i]
			}
		}
		changed := false
		for i := range e {
			if pinned[i] {
				s[i] = float64(floors[i]) / Micro
				continue
			}
			if free > 0 {
				s[i] = rest * e[i] / free
			} else {
				s[i] = 0
			}
			if s[i] < float64(floors[i])/Micro {
				pinned[i] = true
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	// If every region is pinned (floors sum below 1 and all demand zero
	// cannot happen because eff falls back to weights, but be safe), give
	// the remainder to the unpinned or, failing that, spread it evenly.
	return s
}

// roundShares turns fractions into micro-shares summing to exactly Micro,
// each at least its floor: largest remainder, ties broken by index (that is,
// by region name).
func roundShares(frac []float64, floors []int64) []int64 {
	n := len(frac)
	micro := make([]int64, n)
	rem := make([]float64, n)
	var sum int64
	for i, f := range frac {
		x := f * Micro
		micro[i] = int64(math.Floor(x))
		if micro[i] < floors[i] {
			micro[i] = floors[i]
			x = float64(floors[i])
		}
		rem[i] = x - float64(micro[i])
		sum += micro[i]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rem[order[a]] > rem[order[b]] })
	// Hand out what is missing one micro-share at a time by largest
	// remainder; take any excess from the regions furthest above their
	// floors (largest first, then by name).
	for k := 0; sum < Micro; k++ {
		micro[order[k%n]]++
		sum++
	}
	for sum > Micro {
		best := -1
		for i := range micro {
			if micro[i] > floors[i] && (best < 0 || micro[i]-floors[i] > micro[best]-floors[best]) {
				best = i
			}
		}
		micro[best]--
		sum--
	}
	return micro
}
