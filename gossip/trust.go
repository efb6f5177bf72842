package gossip

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
//     keys per region and tick (MaxRegionKeys) are capped.

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
