package gossip

import (
	"math"
	"time"
)

// Room for processes. A node keeps at most Config.MaxProcesses processes of
// a region, so that invented process names cannot exhaust it; but whoever
// holds a region's credentials can fill those slots with processes that
// claim nothing, before a node that starts later hears the region's real
// processes. Refusing the real ones would make that node count the region
// at zero demand and take the limit the region still enforces. So:
//
//   - A new process of a full region takes the slot of the process heard
//     least recently, if that one missed the whole last epoch (invented
//     processes of a forger that stopped, crashed processes); otherwise it
//     is refused. Either way the region is crowded.
//   - While a region other than the node's own is crowded, the node does
//     not know all its claims, so it counts the region as claiming its
//     maximum: MaxClaim × the key's rate for every key in the table, the
//     top of the weight band, and, for a key without digests, more than
//     everyone else (this region gets its floor). It takes the lesser of
//     its shares with the key's demand split trusted and distrusted, so
//     that no view the crowded region may hold of itself leaves it less.
//     A crowded region never counts as missing: its silence can raise
//     nothing. A node's own region being crowded only leaves out some of
//     its own claims, which lowers its own share.
//   - A region stays crowded until every process that was refused or
//     evicted could have come back and earned full trust (crowdTicks).

// crowdTicks is how many ticks a region stays crowded after its last
// refused or evicted process. A refused process takes a freed slot with its
// next digest and then needs the trust ramp to count in full here, while
// the nodes that kept it count it in full: one tick, the ramp, and one for
// the tick its digest is first used. An evicted process may come back
// until the others forget it (StaleAfter after the ramp that makes its
// replacement trusted) and then needs the ramp too.
func (c *Config) crowdTicks() uint64 {
	ramp := uint64(math.Ceil(c.rampTicks()))
	return uint64(c.StaleAfter) + 2*ramp + 2
}

// makeRoomLocked reports whether d's process, new to this node, may be
// kept: its region has fewer than MaxProcesses processes, or the one heard
// least recently missed the last epoch and is evicted for it. Evicting and
// refusing both mark the region crowded. The epoch compared is this node's,
// not d's: a sender cannot evict a process by dating its digest ahead.
func (n *Node) makeRoomLocked(d *Digest, now time.Time) bool {
	var victim *peer
	var victimID peerID
	count := 0
	for id, p := range n.peers {
		if id.region != d.Region {
			continue
		}
		count++
		if id == (peerID{n.cfg.Region, n.cfg.Process}) {
			continue // this process is always kept
		}
		if victim == nil || p.latest() < victim.latest() ||
			(p.latest() == victim.latest() && id.process < victimID.process) {
			victim, victimID = p, id
		}
	}
	if count < n.cfg.MaxProcesses {
		return true
	}
	e := n.epoch(now)
	n.crowded[d.Region] = e
	if victim == nil || victim.latest()+1 >= e {
		return false
	}
	delete(n.peers, victimID)
	n.evicted++
	return true
}

// latest is the epoch of p's latest digest.
func (p *peer) latest() uint64 {
	if p.cur == nil {
		return 0
	}
	return p.cur.Epoch
}

// crowdedLocked returns the regions other than this node's own that are
// crowded at tick e, and forgets those crowded no more.
func (n *Node) crowdedLocked(e uint64) map[string]bool {
	out := map[string]bool{}
	for r, at := range n.crowded {
		switch {
		case e > at+n.cfg.crowdTicks():
			delete(n.crowded, r)
		case r != n.cfg.Region:
			out[r] = true
		}
	}
	return out
}

// crowdedClaim is what a crowded region counts as claiming for a key whose
// claims MaxClaim caps at maxDemand (0: no cap): the cap, or, without one,
// a claim no other region's reaches.
func crowdedClaim(maxDemand float64) float64 {
	if maxDemand > 0 {
		return maxDemand
	}
	return math.MaxFloat32
}

// crowdedShares returns one key's micro-shares while the regions of in
// marked crowded (by index) claim their maximum: of the shares with the
// demand split trusted in full and not at all, the one that leaves this
// region (index own) less. A key's share is linear in trust, so no trust in
// between, which another region may hold for the key, leaves it less.
// demand nil is a key without digests: then the crowded regions claim more
// than all others.
func (n *Node) crowdedShares(in inputs, demand [][2]float64, crowded []bool, own int, maxDemand float64) []int64 {
	claims := make([][2]float64, len(in.regions))
	copy(claims, demand)
	if demand == nil {
		maxDemand = 0
	}
	for i, c := range crowded {
		if c {
			x := crowdedClaim(maxDemand)
			claims[i] = [2]float64{x, x}
		}
	}
	trusted := n.shares(in, claims, 1, maxDemand)
	if demand == nil {
		return trusted
	}
	distrusted := n.shares(in, claims, 0, maxDemand)
	if distrusted[own] < trusted[own] {
		return distrusted
	}
	return trusted
}
