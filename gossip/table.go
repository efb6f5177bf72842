package gossip

import (
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
	in := n.inputs(n.regions, nil)
	t := &table{regions: in.regions, keys: map[string][]int64{}, at: n.clock.Now()}
	t.own = indexOf(t.regions, n.cfg.Region)
	t.def = n.shares(in, nil, 0)
	return t
}

// inputs is what compute gathers under n.mu.
type inputs struct {
	regions []string
	weights []float64               // historical, normalised
	keys    map[string][][2]float64 // key → (demand, admitted) per region
	age     map[string]uint64       // key → oldest age in any digest, epochs
}

// inputs builds the computation's inputs for the regions in set from the
// chosen digest of each peer.
func (n *Node) inputs(set map[string]bool, digests []*Digest) inputs {
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
	keys := make(map[string][][2]float64)
	age := make(map[string]uint64)
	for _, d := range digests {
		i, ok := idx[d.Region]
		if !ok {
			continue
		}
		learned[i] += d.Learned
		for _, k := range d.Keys {
			v := keys[k.Key]
			if v == nil {
				v = make([][2]float64, len(regions))
				keys[k.Key] = v
			}
			v[i][0] += k.Demand
			v[i][1] += k.Admitted
			age[k.Key] = max(age[k.Key], k.Age)
		}
	}
	return inputs{
		regions: regions,
		weights: partition.Weights(configured, learned, n.cfg.WeightPrior),
		keys:    keys,
		age:     age,
	}
}

// trust is how far a key of the given age (epochs) is trusted to show its
// demand split: it ramps from 0 to 1 over TrustRamp.
func (n *Node) trust(age uint64) float64 {
	ramp := float64(n.cfg.TrustRamp) / float64(n.cfg.Interval)
	if ramp <= 0 {
		return 1
	}
	return min(1, float64(age+1)/ramp)
}

// shares returns micro-shares for one key's demand (nil: the default) of
// the given age.
func (n *Node) shares(in inputs, demand [][2]float64, age uint64) []int64 {
	floor := n.cfg.floorFor(len(in.regions))
	rs := make([]partition.Region, len(in.regions))
	for i, r := range in.regions {
		rs[i] = partition.Region{Name: r, Weight: in.weights[i], Floor: floor}
		if demand != nil {
			rs[i].Demand, rs[i].Admitted = demand[i][0], demand[i][1]
		}
	}
	out, err := partition.Shares(rs, partition.Params{Prior: n.cfg.Prior, Trust: n.trust(age), UseTrust: true})
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

// compute recomputes every key's shares at tick epoch e from each live
// process's digest of epoch e-1, over the configured regions less those
// that left. If any known process has no digest of epoch e-1 (it is late,
// partitioned away, or gone without a goodbye), the current table is kept:
// every region notices the same missing epoch, so they all freeze the same
// shares. A process not heard for StaleAfter intervals is dropped if its
// region still has a live process; a region with no live process keeps
// everyone frozen until it is heard again, says goodbye or is forgotten.
// The first tick only listens, and the warm-up table is kept until a
// digest of every configured region is in (or WarmUp ticks have passed).
func (n *Node) compute(now time.Time, e uint64) {
	staleAfter := time.Duration(n.cfg.StaleAfter) * n.cfg.Interval
	n.mu.Lock()
	fresh := map[string]bool{n.cfg.Region: true}
	for id, p := range n.peers {
		if now.Sub(p.lastHeard) <= staleAfter {
			fresh[id.region] = true
		}
	}
	set := map[string]bool{n.cfg.Region: true}
	for r := range n.regions {
		if !n.gone[r] {
			set[r] = true
		}
	}
	missing := false
	got := map[string]bool{n.cfg.Region: true} // regions with a digest of e-1
	digests := make([]*Digest, 0, len(n.peers))
	for id, p := range n.peers {
		if !set[id.region] {
			continue // not configured (never stored) or left
		}
		var d *Digest
		switch {
		case p.cur != nil && p.cur.Epoch == e-1:
			d = p.cur
		case p.prev != nil && p.prev.Epoch == e-1:
			d = p.prev
		case p.prev == nil && p.cur != nil && p.cur.Epoch >= e:
			continue // first heard this tick: counts from the next one
		}
		if d == nil && now.Sub(p.lastHeard) > staleAfter && fresh[id.region] {
			delete(n.peers, id) // its region carries on without it
			continue
		}
		if d == nil {
			missing = true
			continue
		}
		digests = append(digests, d)
		got[id.region] = true
	}
	if n.warming {
		n.warming = n.ticks <= 1 || (n.ticks <= n.cfg.WarmUp && len(got) < len(set))
	}
	n.frozen = missing || n.warming
	if n.frozen {
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()

	in := n.inputs(set, digests)
	t := &table{regions: in.regions, keys: make(map[string][]int64, len(in.keys)), at: now}
	t.own = indexOf(t.regions, n.cfg.Region)
	t.def = n.shares(in, nil, 0)
	for key, demand := range in.keys {
		t.keys[key] = n.shares(in, demand, in.age[key])
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
