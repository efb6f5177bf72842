package partition

import (
	"math"
	"time"
)

// EWMA returns the exponentially weighted moving average of a rate after
// observing sample for elapsed time, with the given half-life: after one
// half-life, half of the old average is left. A non-positive elapsed time
// returns prev; a non-positive half-life returns sample.
func EWMA(prev, sample float64, elapsed, halfLife time.Duration) float64 {
	if elapsed <= 0 {
		return prev
	}
	if halfLife <= 0 {
		return sample
	}
	keep := math.Exp2(-float64(elapsed) / float64(halfLife))
	return keep*prev + (1-keep)*sample
}

// Hold is hysteresis: it returns published unless candidate differs from it
// by more than threshold × published (threshold is relative, e.g. 0.1 for
// 10 %), in which case it returns candidate. Values at or below zeroBelow
// count as zero, so a dying rate settles at exactly 0 instead of decaying
// forever. Noise within the threshold leaves the published value, and so
// every share computed from it, unchanged.
func Hold(published, candidate, threshold, zeroBelow float64) float64 {
	if candidate <= zeroBelow {
		candidate = 0
	}
	if published <= zeroBelow {
		return candidate
	}
	if math.Abs(candidate-published) <= threshold*published {
		return published
	}
	return candidate
}

// Weights blends configured historical weights with weights learned from
// region totals. configured and learned are indexed alike; learned totals are
// in cost units per second and prior (same unit) is how much learned traffic
// counts as much as the configuration: w_r ∝ prior · c_r/Σc + learned_r.
// With no learned traffic the configured weights are returned (normalised);
// with learned traffic much larger than prior the learned ones win. All
// configured weights zero counts as equal weights.
func Weights(configured, learned []float64, prior float64) []float64 {
	n := len(configured)
	out := make([]float64, n)
	if n == 0 {
		return out
	}
	var cs float64
	for _, c := range configured {
		if c > 0 {
			cs += c
		}
	}
	var sum float64
	for i := range out {
		c := 1 / float64(n)
		if cs > 0 {
			c = math.Max(configured[i], 0) / cs
		}
		l := 0.0
		if i < len(learned) && learned[i] > 0 && !math.IsInf(learned[i], 0) {
			l = learned[i]
		}
		out[i] = prior*c + l
		sum += out[i]
	}
	for i := range out {
		if sum > 0 {
			out[i] /= sum
		} else {
			out[i] = 1 / float64(n)
		}
	}
	return out
}

// Band bounds learned weights to a band around the configured ones: each
// weight ends within [c_r/factor, c_r·factor] of its configured weight
// c_r (configured normalised; all zero counts as equal), scaled so that
// the weights still sum to 1. Learned region totals are self-reported,
// so without a band one absurd total takes every default share; with it, a
// region's weight is at least c_r/factor whatever the others report.
// weights and configured are indexed alike; factor ≤ 1 returns the
// configured weights. The scaling is found by bisection: the same inputs
// give the same outputs everywhere.
func Band(weights, configured []float64, factor float64) []float64 {
	n := len(weights)
	out := make([]float64, n)
	if n == 0 {
		return out
	}
	c := Weights(configured, nil, 1)
	if !(factor > 1) || math.IsInf(factor, 0) {
		copy(out, c)
		return out
	}
	clamp := func(i int, x float64) float64 {
		return math.Min(math.Max(x, c[i]/factor), c[i]*factor)
	}
	// tiny stands in for a zero or invalid weight: such a region stays at
	// its floor unless every other one is at its ceiling.
	const tiny = 1e-300
	w := make([]float64, n)
	for i := range w {
		w[i] = weights[i]
		if math.IsNaN(w[i]) || math.IsInf(w[i], 0) || w[i] < tiny {
			w[i] = tiny
		}
	}
	sum := func(lnK float64) float64 {
		k := math.Exp(lnK)
		var s float64
		for i := range w {
			s += clamp(i, k*w[i])
		}
		return s
	}
	// Σ clamp(k·w_i) grows with k from Σ c_i/factor < 1 to Σ c_i·factor > 1:
	// bisect on ln k over a range that takes every weight in [tiny, max]
	// from below its floor to above its ceiling.
	lo, hi := -700.0, 700.0
	for i := 0; i < 200; i++ {
		mid := (lo + hi) / 2
		if sum(mid) < 1 {
			lo = mid
		} else {
			hi = mid
		}
	}
	k := math.Exp(hi)
	var total float64
	for i := range out {
		out[i] = clamp(i, k*w[i])
		total += out[i]
	}
	for i := range out {
		out[i] /= total // removes the bisection's last rounding error
	}
	return out
}
