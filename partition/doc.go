// Package partition computes each region's share of a key's global limit from
// demand, historical weights and floors. It is pure arithmetic: no I/O, no
// clock, no network client, no goroutines, no package state. Every function
// is deterministic: the same inputs, in any order, give the same outputs on
// every machine, because regions are sorted by name before any arithmetic
// and no result depends on map iteration order.
//
// # The share algorithm
//
// For one key, each region r brings a smoothed demand d_r (cost units per
// second, spent + rejected), a smoothed admitted cost a_r, a historical weight
// w_r and a floor f_r. Shares computes
//
//	e_r = T · max(d_r, a_r) + (1 − T) · D · w_r/Σw + Prior · w_r/Σw
//	                                             (effective demand; D = Σ max(d, a))
//	s_r = max(f_r, λ · e_r)                      (water-filling)
//
// with λ chosen so that Σ s_r = 1. Trust T in [0, 1] says how far the
// key's demand split is believed over the historical one: callers ramp it
// up with the key's age, because a new key's first samples are noise. The
// Prior term is a pseudo-demand spread by
// the historical weights: a key with no recent data gets exactly the
// historical weights (floored), and a key with heavy traffic follows its
// demand. Floors keep quiet regions from being starved: a region that saw no
// traffic for a key still holds f_r of it, so its first requests are not
// rejected (the Cadence lesson: traffic-weighted allowances starve quiet
// regions unless a floor holds). s_r is monotone in d_r.
//
// Demand is self-reported by the regions, so Params.MaxDemand caps each
// region's max(d_r, a_r) before anything else: whatever the others claim, a
// region with demand d keeps at least (1 − Σ f) · T · min(d, cap) /
// (n · cap + Prior) of the limit. Band likewise keeps learned historical
// weights within a factor of the configured ones.
//
// Shares are returned as integer micro-shares (Micro = 1,000,000 is the whole
// limit), rounded by the largest-remainder method with ties broken by region
// name, so that they sum to exactly Micro and keep every floor.
//
// # Smoothing and hysteresis
//
// Shares itself is stateless. Smoothing and hysteresis are applied to the
// demand before it is shared between regions (EWMA, then Hold), by the
// process that measured it, so that every region computes its shares from
// the same published numbers and therefore gets the same shares. Noise
// within the Hold threshold does not change the published demand and so does
// not move any share.
package partition
