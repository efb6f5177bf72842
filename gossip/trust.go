package gossip

import (
	"math"
	"sort"
	"time"
)

// Bounded trust. Every limiter of a region shares the region's NATS
// credentials, so whoever holds them may publish any digest or goodbye on
// <Subject>.<region>.<any process>. What such a sender can do is bounded
// here and in compute:
//
//   - A goodbye only marks its process as leaving; a digest after it
//     undoes it. A region is dropped only once every one of its processes
//     has said goodbye and then stayed silent for StaleAfter intervals, so
//     goodbyes that its own digests contradict take no share from it.
//   - A process's claims count in proportion to its trust, which ramps over
//     TrustRamp from the receiver's own count of ticks it has had the
//     process's digest (peer.seen), not from anything the digest says; a
//     key's age, which ramps the key's trust, is capped the same way.
//   - A region's claims for a key count up to MaxClaim × the key's rate
//     (Config.Rate), so no claim pins another region at its floor; learned
//     region weights stay within WeightBand of the configured ones.
//   - Only a trusted process counts as missing, so unknown and one-shot
//     processes never freeze shares; and a trusted process that misses a
//     tick while others of its region are heard is counted from its last
//     digest instead of freezing everyone.
//   - Processes per region (MaxProcesses), keys per digest (MaxKeys) and
//     keys per region and tick (MaxRegionKeys) are capped; a region whose
//     processes do not all fit counts as claiming its maximum (room.go).
//   - A node counts the processes of its own region conservatively
//     (ownView), so that digests which reach some regions before their tick
//     and others after cannot make the regions' own shares sum above 1.

// dropReason says why keys of a stored digest were left out; it labels
// quota_gossip_dropped_keys_total{reason}.
type dropReason int

const (
	// dropProcessCap: keys of one digest beyond Config.MaxKeys.
	dropProcessCap dropReason = iota
	// dropRegionCap: keys of one region beyond Config.MaxRegionKeys, at one
	// tick.
	dropRegionCap
	numDrops
)

func (r dropReason) String() string {
	switch r {
	case dropProcessCap:
		return "process_cap"
	case dropRegionCap:
		return "region_cap"
	}
	return "unknown"
}

// rampTicks is TrustRamp in intervals, at least 1.
func (c *Config) rampTicks() float64 {
	return max(1, float64(c.TrustRamp)/float64(c.Interval))
}

// ticksLocked is how many ticks this node counts process id as heard: its
// own count, plus, for a process it found publishing when it started, the
// oldest key age of the first digest it had (a node that heard the process
// from its start counted those ticks itself; only a node that starts
// together with a forged process can be told a false age).
func (n *Node) ticksLocked(p *peer) float64 {
	t := float64(p.seen)
	if p.inherited {
		t += float64(p.age0)
	}
	return t
}

// peerTrustLocked is how far process id's claims count, in (0, 1]: its
// ticks heard over the ramp; 1 for this process.
func (n *Node) peerTrustLocked(id peerID, p *peer) float64 {
	if id == (peerID{n.cfg.Region, n.cfg.Process}) {
		return 1
	}
	return min(1, n.ticksLocked(p)/n.cfg.rampTicks())
}

// maxKeyAgeLocked is the oldest key age this node believes of process id,
// whatever its digest says: one less than the ticks it counts the process
// as heard.
func (n *Node) maxKeyAgeLocked(id peerID, p *peer) uint64 {
	if id == (peerID{n.cfg.Region, n.cfg.Process}) {
		return MaxKeyAge
	}
	return uint64(max(0, n.ticksLocked(p)-1))
}

// ownView is what a node counts of process id of its own region at tick e
// (now): for every claim, the least of its digests of epochs e-1 and e-2,
// a digest counting as zero claims unless held, and the one of e-2 only if
// it arrived half an interval before the tick. Nodes of other regions
// count the latest digest they hold; so whichever of the two they hold
// (the one of e-2 reached them, if digests cross the gateways in under half
// an interval, and the one of e-1 counts as zero here unless held), they
// count at least this much of the process. With shares monotone in demand
// (more of one's own demand never lowers one's share, more of another's
// never raises it), every region then takes at most its share of one
// common view, and the regions' own shares sum to at most 1 however a
// sender times its digests. The price: a region's own rise in demand
// reaches its own share one tick after the others see it.
func (n *Node) ownViewLocked(id peerID, p *peer, e uint64, now time.Time) *Digest {
	last, _ := p.of(e - 1)
	before, at := p.of(e - 2)
	if last == nil || before == nil || now.Sub(at) < n.cfg.Interval/2 {
		return nil
	}
	prevKeys := make(map[string]KeyDemand, len(before.Keys))
	for _, k := range before.Keys {
		prevKeys[k.Key] = k
	}
	d := &Digest{Region: id.region, Process: id.process, Epoch: e - 1,
		Demand: min(last.Demand, before.Demand), Admitted: min(last.Admitted, before.Admitted),
		Learned: min(last.Learned, before.Learned)}
	for _, k := range last.Keys {
		b, ok := prevKeys[k.Key]
		if !ok {
			continue
		}
		k.Demand, k.Admitted, k.Age = min(k.Demand, b.Demand), min(k.Admitted, b.Admitted), min(k.Age, b.Age+1)
		if k.Demand > 0 || k.Admitted > 0 {
			d.Keys = append(d.Keys, k)
		}
	}
	return d
}

// sameDigest reports whether a and b carry the same claims.
func sameDigest(a, b *Digest) bool {
	if a.Demand != b.Demand || a.Admitted != b.Admitted || a.Learned != b.Learned || len(a.Keys) != len(b.Keys) {
		return false
	}
	for i := range a.Keys {
		if a.Keys[i] != b.Keys[i] {
			return false
		}
	}
	return true
}

// mergeDigests combines two digests of one process and epoch, one of them
// forged. A node of the process's own region keeps the lesser of every
// claim (a key missing from either counts as zero), a node of another
// region the greater (at most MaxKeys keys, those with the greatest claims,
// ties by key): whichever versions each node holds, a region never counts
// more of its own processes than another region does (see ownViewLocked),
// and merging is order-free, so nodes holding the same versions agree.
func (n *Node) mergeDigests(a, b *Digest, lower bool) *Digest {
	pick := math.Max
	if lower {
		pick = math.Min
	}
	out := &Digest{Region: a.Region, Process: a.Process, Epoch: a.Epoch,
		Demand: pick(a.Demand, b.Demand), Admitted: pick(a.Admitted, b.Admitted), Learned: pick(a.Learned, b.Learned)}
	bk := make(map[string]KeyDemand, len(b.Keys))
	for _, k := range b.Keys {
		bk[k.Key] = k
	}
	if lower {
		for _, k := range a.Keys {
			if o, ok := bk[k.Key]; ok {
				out.Keys = append(out.Keys, KeyDemand{Key: k.Key, Demand: min(k.Demand, o.Demand), Admitted: min(k.Admitted, o.Admitted), Age: min(k.Age, o.Age)})
			}
		}
		sortKeys(out.Keys)
		return out
	}
	for _, k := range a.Keys {
		if o, ok := bk[k.Key]; ok {
			k = KeyDemand{Key: k.Key, Demand: max(k.Demand, o.Demand), Admitted: max(k.Admitted, o.Admitted), Age: max(k.Age, o.Age)}
			delete(bk, k.Key)
		}
		out.Keys = append(out.Keys, k)
	}
	for _, k := range b.Keys {
		if _, ok := bk[k.Key]; ok {
			out.Keys = append(out.Keys, k)
		}
	}
	sortKeys(out.Keys)
	if len(out.Keys) > n.cfg.MaxKeys {
		out.Keys = out.Keys[:n.cfg.MaxKeys]
	}
	return out
}

// sortKeys orders keys by their greater claim, most first, ties by key.
func sortKeys(keys []KeyDemand) {
	sort.Slice(keys, func(i, j int) bool {
		ci, cj := max(keys[i].Demand, keys[i].Admitted), max(keys[j].Demand, keys[j].Admitted)
		if ci != cj {
			return ci > cj
		}
		return keys[i].Key < keys[j].Key
	})
}
