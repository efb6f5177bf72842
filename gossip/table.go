package gossip

import (
	"math"
	"sort"
	"time"

	"github.com/quotaplatform/quota/partition"
)

// table is one computation's shares; it is never modified after it is
// published through Node.table.
type table struct {
	regions []string           // sorted
	own     int                // index of this region in regions
	keys    map[string][]int64 // key → micro-shares, indexed like regions
	def     []int64            // micro-shares of a key with no digests
	at      time.Time          // when computed
}

func (t *table) micro(key string) int64 {
	s := t.def
	if k, ok := t.keys[key]; ok {
		s = k
	}
	return s[t.own]
}

func (t *table) share(key string) float64 {
	m := t.micro(key)
	if m <= 0 {
		m = 1 // Share is documented to be in (0, 1]
	}
	return float64(m) / partition.Micro
}

// warmupTable is the table until the warm-up is over (see Config.WarmUp):
// every key gets the default shares over every configured region, as if
// all were present with their configured weights (equal without weights).
// A new process must not assume it is alone: the others may already hold
// shares summing to 1 without it.
func (n *Node) warmupTable() *table {
	in := n.inputs(n.regions, nil, nil)
	t := &table{regions: in.regions, keys: map[string][]int64{}, at: n.clock.Now()}
	t.own = indexOf(t.regions, n.cfg.Region)
	t.def = n.shares(in, nil, n.trust(0), 0)
	return t
}

// inputs is what compute gathers under n.mu.
type inputs struct {
	regions []string
	weights []float64               // historical, normalised
	keys    map[string][][2]float64 // key → (demand, admitted) per region
	age     map[string]uint64       // key → oldest age in any digest, epochs
}

// use is one process's digest as a tick counts it: its claims scaled by
// trust, its keys' ages capped at maxAge (see trust.go).
type use struct {
	d      *Digest
	trust  float64
	maxAge uint64
}

// inputs builds the computation's inputs for the regions in set from the
// chosen digest of each process, sorted by region and process so that
// every node adds the same numbers in the same order. Each region keeps
// at most MaxRegionKeys keys (see regionKeys). A crowded region's learned
// weight counts as the top of the band (room.go).
func (n *Node) inputs(set map[string]bool, used []use, crowded map[string]bool) inputs {
	regions := make([]string, 0, len(set))
	for r := range set {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	idx := make(map[string]int, len(regions))
	for i, r := range regions {
		idx[r] = i
	}
	configured := make([]float64, len(regions))
	learned := make([]float64, len(regions))
	for i, r := range regions {
		configured[i] = n.cfg.Weights[r]
	}
	per := make([]map[string][2]float64, len(regions))
	byRegion := make([][]*Digest, len(regions))
	age := make(map[string]uint64)
	for _, u := range used {
		i, ok := idx[u.d.Region]
		if !ok {
			continue
		}
		learned[i] += u.trust * u.d.Learned
		byRegion[i] = append(byRegion[i], u.d)
		if per[i] == nil {
			per[i] = make(map[string][2]float64)
		}
		for _, k := range u.d.Keys {
			v := per[i][k.Key]
			v[0] += u.trust * k.Demand
			v[1] += u.trust * k.Admitted
			per[i][k.Key] = v
			age[k.Key] = max(age[k.Key], min(k.Age, u.maxAge))
		}
	}
	for i, r := range regions {
		if crowded[r] {
			learned[i] = math.MaxFloat32
		}
	}
	keys := make(map[string][][2]float64)
	for i, m := range per {
		for _, key := range n.regionKeys(m, byRegion[i]) {
			v := keys[key]
			if v == nil {
				v = make([][2]float64, len(regions))
				keys[key] = v
			}
			v[i] = m[key]
		}
	}
	return inputs{
		regions: regions,
		weights: partition.Band(partition.Weights(configured, learned, n.cfg.WeightPrior), configured, n.cfg.WeightBand),
		keys:    keys,
		age:     age,
	}
}

// regionKeys returns the keys of one region's claims m, at most
// MaxRegionKeys of them. Beyond that, the region's digests (in process
// order) take turns, each giving its next key not yet taken in its own
// order (most demand first): every process keeps its hottest keys however
// many keys others claim, and every node keeps the same ones.
func (n *Node) regionKeys(m map[string][2]float64, digests []*Digest) []string {
	out := make([]string, 0, min(len(m), n.cfg.MaxRegionKeys))
	if len(m) <= n.cfg.MaxRegionKeys {
		for key := range m {
			out = append(out, key)
		}
		return out
	}
	taken := make(map[string]bool, n.cfg.MaxRegionKeys)
	pos := make([]int, len(digests))
	for more := true; more && len(out) < n.cfg.MaxRegionKeys; {
		more = false
		for i, d := range digests {
			for pos[i] < len(d.Keys) && taken[d.Keys[pos[i]].Key] {
				pos[i]++
			}
			if pos[i] == len(d.Keys) || len(out) == n.cfg.MaxRegionKeys {
				continue
			}
			key := d.Keys[pos[i]].Key
			taken[key] = true
			out = append(out, key)
			more = true
		}
	}
	n.dropped[dropRegionCap].Add(uint64(len(m) - len(out)))
	return out
}

// trust is how far a key of the given age (epochs) is trusted to show its
// demand split: it ramps from 0 to 1 over TrustRamp.
func (n *Node) trust(age uint64) float64 {
	return min(1, float64(age+1)/n.cfg.rampTicks())
}

// shares returns micro-shares for one key's demand (nil: the default),
// its demand split trusted as far as trust (see Node.trust); maxDemand caps
// each region's claim (0: no cap).
func (n *Node) shares(in inputs, demand [][2]float64, trust, maxDemand float64) []int64 {
	floor := n.cfg.floorFor(len(in.regions))
	rs := make([]partition.Region, len(in.regions))
	for i, r := range in.regions {
		rs[i] = partition.Region{Name: r, Weight: in.weights[i], Floor: floor}
		if demand != nil {
			rs[i].Demand, rs[i].Admitted = demand[i][0], demand[i][1]
		}
	}
	out, err := partition.Shares(rs, partition.Params{Prior: n.cfg.Prior, Trust: trust, UseTrust: true, MaxDemand: maxDemand})
	micro := make([]int64, len(rs))
	if err != nil {
		// Inputs are validated on decode; this cannot happen. Fall back to
		// an even split rather than failing.
		n.log.Error("partition shares", "err", err)
		for i := range micro {
			micro[i] = partition.Micro / int64(len(micro))
		}
		micro[0] += partition.Micro - partition.Micro/int64(len(micro))*int64(len(micro))
		return micro
	}
	for i, s := range out { // out is sorted by name, like in.regions
		micro[i] = s.Micro
	}
	return micro
}

// maxDemand is the most a region may claim for key: MaxClaim × its rate,
// or 0 (no cap) when the rate is unknown.
func (n *Node) maxDemand(key string) float64 {
	if n.cfg.Rate == nil {
		return 0
	}
	r := n.cfg.Rate(key)
	if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 {
		return 0
	}
	return n.cfg.MaxClaim * r
}

// compute recomputes every key's shares at tick epoch e from each
// process's latest digest of an epoch before e, over the configured
// regions less those that left.
//
// A region is missing when it has trusted processes that have not said
// goodbye and none of them has a digest of epoch e-1 (it is partitioned
// away, or crashed): then the current table is kept. A crowded region
// (room.go) is never missing: it counts as claiming its maximum. Every region notices
// the same missing epoch, so they all freeze the same shares. A trusted
// process late while others of its region are heard counts with its last
// digest; an untrusted one only counts with a digest of e-1, and never
// freezes anything (see trust.go).
//
// A process silent for StaleAfter intervals is dropped if it said goodbye,
// is not yet trusted, or its region still has a live trusted process; a
// region whose last process is dropped after a goodbye has left. A region
// silent without goodbye keeps everyone frozen until it is heard again or
// forgotten. The first tick only listens, and the warm-up table is kept
// until a digest of every configured region is in (or WarmUp ticks have
// passed).
func (n *Node) compute(now time.Time, e uint64) {
	staleAfter := time.Duration(n.cfg.StaleAfter) * n.cfg.Interval
	n.mu.Lock()
	set := map[string]bool{n.cfg.Region: true}
	for r := range n.regions {
		if !n.gone[r] {
			set[r] = true
		}
	}
	type view struct {
		id      peerID
		p       *peer
		d       *Digest // latest before e, or nil
		current bool    // d is of epoch e-1
		trusted bool
		silent  bool
	}
	crowded := n.crowdedLocked(e)
	views := make([]view, 0, len(n.peers))
	live := map[string]bool{n.cfg.Region: true}    // a trusted process heard lately
	expected := map[string]bool{}                  // a trusted process that did not leave
	present := map[string]bool{n.cfg.Region: true} // ... with a digest of e-1
	got := map[string]bool{n.cfg.Region: true}     // any digest of e-1
	for id, p := range n.peers {
		if !set[id.region] {
			continue // not configured (never stored) or left
		}
		v := view{id: id, p: p, d: p.at(e), silent: now.Sub(p.lastHeard) > staleAfter}
		v.current = v.d != nil && v.d.Epoch == e-1
		if v.current {
			got[id.region] = true
		}
		if v.d != nil && v.d.Epoch+uint64(n.cfg.StaleAfter) >= e && (p.seen == 0 || v.d.Epoch > p.counted) {
			p.seen++ // late digests count too: a process always late still earns trust, then freezes when missing
			p.counted = v.d.Epoch
		}
		v.trusted = n.peerTrustLocked(id, p) >= 1
		if v.trusted && !p.bye {
			expected[id.region] = true
			if !v.silent {
				live[id.region] = true
			}
			if v.current {
				present[id.region] = true
			}
		}
		views = append(views, v)
	}
	sort.Slice(views, func(i, j int) bool {
		a, b := views[i].id, views[j].id
		return a.region < b.region || (a.region == b.region && a.process < b.process)
	})
	missing := false
	for r := range expected {
		if !present[r] && !crowded[r] {
			missing = true
		}
	}
	used := make([]use, 0, len(views))
	for _, v := range views {
		if v.silent && (v.p.bye || !v.trusted || live[v.id.region]) {
			delete(n.peers, v.id) // left, never trusted, or its region carries on without it
			if v.p.bye && v.id.region != n.cfg.Region && !n.regionHasPeersLocked(v.id.region) {
				n.gone[v.id.region] = true
			}
			continue
		}
		d := v.d
		if n.cfg.StrictOwnView && v.id.region == n.cfg.Region && v.id.process != n.cfg.Process {
			// This process's own digest it published itself: no sender
			// can time it (ownViewLocked).
			d = n.ownViewLocked(v.id, v.p, e, now)
		}
		if d == nil {
			continue
		}
		used = append(used, use{d: d, trust: n.peerTrustLocked(v.id, v.p), maxAge: n.maxKeyAgeLocked(v.id, v.p)})
	}
	if n.warming {
		n.warming = n.ticks <= 1 || (n.ticks <= n.cfg.WarmUp && len(got) < len(set))
	}
	n.frozen = missing || n.warming
	if n.frozen {
		n.mu.Unlock()
		return
	}
	for r := range set {
		if n.gone[r] {
			delete(set, r) // left at this tick
		}
	}
	n.mu.Unlock()

	in := n.inputs(set, used, crowded)
	t := &table{regions: in.regions, keys: make(map[string][]int64, len(in.keys)), at: now}
	t.own = indexOf(t.regions, n.cfg.Region)
	var isCrowded []bool // by index of in.regions; nil when none is
	for i, r := range in.regions {
		if crowded[r] {
			if isCrowded == nil {
				isCrowded = make([]bool, len(in.regions))
			}
			isCrowded[i] = true
		}
	}
	if isCrowded == nil {
		t.def = n.shares(in, nil, n.trust(0), 0)
		for key, demand := range in.keys {
			t.keys[key] = n.shares(in, demand, n.trust(in.age[key]), n.maxDemand(key))
		}
	} else {
		t.def = n.crowdedShares(in, nil, isCrowded, t.own, 0)
		for key, demand := range in.keys {
			t.keys[key] = n.crowdedShares(in, demand, isCrowded, t.own, n.maxDemand(key))
		}
	}
	old := n.table.Swap(t)
	n.notify(old, t)
}

// notify calls OnChange for keys whose share moved by ChangeThreshold or
// more, and OnChangeAll when the default did.
func (n *Node) notify(old, cur *table) {
	limit := int64(n.cfg.ChangeThreshold * partition.Micro)
	moved := func(a, b int64) bool {
		d := a - b
		if d < 0 {
			d = -d
		}
		return d > 0 && d >= limit
	}
	if n.cfg.OnChangeAll != nil && moved(old.def[old.own], cur.def[cur.own]) {
		n.cfg.OnChangeAll()
	}
	if n.cfg.OnChange == nil {
		return
	}
	for key := range cur.keys {
		if moved(old.micro(key), cur.micro(key)) {
			n.shareChanges.Add(1)
			n.cfg.OnChange(key)
		}
	}
	for key := range old.keys {
		if _, ok := cur.keys[key]; !ok && moved(old.micro(key), cur.micro(key)) {
			n.shareChanges.Add(1)
			n.cfg.OnChange(key)
		}
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return 0
}
