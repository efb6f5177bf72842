package gossip

import (
	"sort"
	"time"

	"github.com/quotaplatform/quota/partition"
)

// Snapshot is the Node's state for a debug endpoint. Shares are fractions
// of each key's global limit per region.
type Snapshot struct {
	Region  string `json:"region"`
	Process string `json:"process"`
	// ComputedAt is when the shares were last computed.
	ComputedAt time.Time `json:"computed_at"`
	// Frozen reports that a region is stale (or the node is warming up), so
	// shares are being kept, not recomputed.
	Frozen bool `json:"frozen"`
	// WarmingUp reports that the node has not yet had a digest of every
	// configured region (Config.WarmUp): every key has the default shares.
	WarmingUp bool           `json:"warming_up"`
	Regions   []RegionStatus `json:"regions"`
	// Default is the share of a key without digests, per region.
	Default map[string]float64 `json:"default"`
	// Keys holds every key with digests: key → region → share.
	Keys map[string]map[string]float64 `json:"keys"`
	// DigestBytes is the size of the last digest published.
	DigestBytes int `json:"digest_bytes"`
	// BadDigests counts digests rejected by the decoder.
	BadDigests uint64 `json:"bad_digests"`
	// RejectedDigests counts well-formed digests refused, by reason:
	// "subject_mismatch" (region or process not the subject's),
	// "unknown_region" (region not in Config.Regions),
	// "epoch_out_of_range", "too_many_processes" (Config.MaxProcesses) and
	// "conflicting_digest" (a second digest of one process for one epoch,
	// merged, not refused).
	RejectedDigests map[string]uint64 `json:"rejected_digests"`
	// DroppedKeys counts keys of stored digests left out of the shares, by
	// reason: "process_cap" (Config.MaxKeys) and "region_cap"
	// (Config.MaxRegionKeys, counted at every tick).
	DroppedKeys map[string]uint64 `json:"dropped_keys"`
	// ShareChanges counts OnChange calls: keys whose share for this region
	// moved by ChangeThreshold or more.
	ShareChanges uint64 `json:"share_changes"`
	// EvictedProcesses counts processes dropped to make room for a new
	// process of a full region (Config.MaxProcesses), having missed the
	// last epoch.
	EvictedProcesses uint64 `json:"evicted_processes"`
}

// RegionStatus is one region as this Node sees it.
type RegionStatus struct {
	Name string `json:"name"`
	// Age is the time since the region's last digest (for this region: since
	// this process's last tick or another local process's digest); -1 if
	// never heard.
	Age time.Duration `json:"age_ns"`
	// Processes counts the processes with a digest; Trusted those of them
	// heard for TrustRamp (or publishing before this node started), whose
	// claims count in full and whose silence freezes shares.
	Processes int  `json:"processes"`
	Trusted   int  `json:"trusted"`
	Stale     bool `json:"stale"`
	Gone      bool `json:"gone"`
	// Crowded: a process of the region was refused or evicted for want of
	// room (Config.MaxProcesses) lately, so this node may not know all its
	// claims; if it is another region, it counts as claiming its maximum.
	Crowded bool `json:"crowded"`
}

// Snapshot returns the current state.
func (n *Node) Snapshot() Snapshot {
	t := n.table.Load()
	now := n.clock.Now()
	staleAfter := time.Duration(n.cfg.StaleAfter) * n.cfg.Interval
	s := Snapshot{
		Region: n.cfg.Region, Process: n.cfg.Process, ComputedAt: t.at,
		Default: make(map[string]float64, len(t.regions)),
		Keys:    make(map[string]map[string]float64, len(t.keys)),
	}
	for i, r := range t.regions {
		s.Default[r] = float64(t.def[i]) / partition.Micro
	}
	for key, m := range t.keys {
		per := make(map[string]float64, len(m))
		for i, r := range t.regions {
			per[r] = float64(m[i]) / partition.Micro
		}
		s.Keys[key] = per
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s.Frozen, s.WarmingUp, s.DigestBytes, s.BadDigests = n.frozen, n.warming, n.lastBytes, n.bad
	s.RejectedDigests = make(map[string]uint64, numReasons)
	for r := rejectReason(0); r < numReasons; r++ {
		s.RejectedDigests[r.String()] = n.rejected[r]
	}
	s.DroppedKeys = make(map[string]uint64, numDrops)
	for r := dropReason(0); r < numDrops; r++ {
		s.DroppedKeys[r.String()] = n.dropped[r].Load()
	}
	s.ShareChanges = n.shareChanges.Load()
	s.EvictedProcesses = n.evicted
	names := map[string]bool{n.cfg.Region: true}
	for _, r := range t.regions {
		names[r] = true
	}
	for r := range n.heard {
		names[r] = true
	}
	procs, trusted := map[string]int{}, map[string]int{}
	for id, p := range n.peers {
		procs[id.region]++
		if n.peerTrustLocked(id, p) >= 1 {
			trusted[id.region]++
		}
	}
	for r := range names {
		_, crowded := n.crowded[r]
		st := RegionStatus{Name: r, Age: -1, Processes: procs[r], Trusted: trusted[r], Gone: n.gone[r], Crowded: crowded}
		if h, ok := n.heard[r]; ok {
			st.Age = now.Sub(h)
			st.Stale = st.Age > staleAfter && !st.Gone
		}
		s.Regions = append(s.Regions, st)
	}
	sort.Slice(s.Regions, func(i, j int) bool { return s.Regions[i].Name < s.Regions[j].Name })
	return s
}

// Shares returns every region's share of key, for GET /v1/keys/{key}.
func (n *Node) Shares(key string) map[string]float64 {
	t := n.table.Load()
	out := make(map[string]float64, len(t.regions))
	m := t.def
	if k, ok := t.keys[key]; ok {
		m = k
	}
	for i, r := range t.regions {
		out[r] = float64(m[i]) / partition.Micro
	}
	return out
}

// SharesAge is the time since the shares were last computed.
func (n *Node) SharesAge() time.Duration {
	t := n.table.Load()
	if t.at.IsZero() {
		return 0
	}
	return n.clock.Now().Sub(t.at)
}

// Age returns the time since region's last digest, and false if it was
// never heard.
func (n *Node) Age(region string) (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.heard[region]
	if !ok {
		return 0, false
	}
	return n.clock.Now().Sub(h), true
}
