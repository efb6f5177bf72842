package gossip

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// HotKey is one key's part of the demand that the latest digests report.
type HotKey struct {
	Key string `json:"key"`
	// Demand and Admitted are summed over the processes whose latest digest
	// carries the key, cost units per second (smoothed, as gossiped).
	Demand   float64 `json:"demand"`
	Admitted float64 `json:"admitted"`
	// DemandShare is Demand over the total demand of every process counted
	// (HotKeys.Demand): the key's part of the traffic.
	DemandShare float64 `json:"demand_share"`
	// Processes is how many processes' digests carry the key.
	Processes int `json:"processes"`
}

// HotKeys is the fleet's (or one region's) hottest keys, from the latest
// digest of every live process.
type HotKeys struct {
	// Region is the region asked for; "" is every region.
	Region string `json:"region"`
	// Processes is the number of processes whose digests were read.
	Processes int `json:"processes"`
	// Demand and Admitted are those processes' total demand and admitted
	// cost over all keys, cost units per second.
	Demand   float64  `json:"demand"`
	Admitted float64  `json:"admitted"`
	Keys     []HotKey `json:"keys"`
}

// HotKeys returns the k keys with the most demand in the latest digest of
// every process heard (of region, or of every region when region is ""),
// most demand first (ties by key). Each process gossips only its top keys
// (Config.TopK and the digest size bound), so a key's demand counts only
// the processes where it is among those: for a hot key that is every
// process that serves it, and what is left out is bounded by the demand of
// each process's least key gossiped. Memory is bounded the same way: the
// digests hold at most TopK keys per process.
func (n *Node) HotKeys(region string, k int) HotKeys {
	out := HotKeys{Region: region}
	if k <= 0 {
		return out
	}
	type sum struct {
		demand, admitted float64
		procs            int
	}
	sums := map[string]*sum{}
	n.mu.Lock()
	for id, p := range n.peers {
		if p.cur == nil || (region != "" && id.region != region) {
			continue
		}
		// Claims count as they do for shares (trust.go): scaled by the
		// process's trust and each at most MaxClaim × the key's rate, so
		// that an invented process's absurd claims do not top the list.
		trust := n.peerTrustLocked(id, p)
		out.Processes++
		out.Demand += trust * p.cur.Demand
		out.Admitted += trust * p.cur.Admitted
		for _, kd := range p.cur.Keys {
			s := sums[kd.Key]
			if s == nil {
				s = &sum{}
				sums[kd.Key] = s
			}
			d, a := kd.Demand, kd.Admitted
			if m := n.maxDemand(kd.Key); m > 0 {
				d, a = min(d, m), min(a, m)
			}
			s.demand += trust * d
			s.admitted += trust * a
			s.procs++
		}
	}
	n.mu.Unlock()
	keys := make([]HotKey, 0, len(sums))
	for key, s := range sums {
		h := HotKey{Key: key, Demand: s.demand, Admitted: s.admitted, Processes: s.procs}
		if out.Demand > 0 {
			h.DemandShare = min(1, s.demand/out.Demand)
		}
		keys = append(keys, h)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Demand != keys[j].Demand {
			return keys[i].Demand > keys[j].Demand
		}
		return keys[i].Key < keys[j].Key
	})
	out.Keys = keys[:min(k, len(keys))]
	return out
}

// The hot-key metrics are labelled by rank only: /metrics carries no key
// (it is open to any scraper), and a rank label bounds the series to
// Config.HotKeyMetrics per metric. Which key holds a rank is answered by
// HotKeys, behind the daemon's read token (GET /v1/hotkeys).
var (
	descHotShare = prometheus.NewDesc("quota_hotkey_demand_share",
		"Part of the fleet's gossiped demand taken by each of its hottest keys, by rank from 1 (which key: GET /v1/hotkeys).",
		[]string{"rank"}, nil)
	descHotAdmitted = prometheus.NewDesc("quota_hotkey_admitted_rate",
		"Admitted cost per second of each of the fleet's hottest keys, by rank, summed over the processes that gossip it.",
		[]string{"rank"}, nil)
	descHotRegionShare = prometheus.NewDesc("quota_hotkey_region_share",
		"This region's share of the global limit of each of the fleet's hottest keys, by rank (the gossip shares; /debug/shares shows any key's).",
		[]string{"rank"}, nil)
)

// hotKeyCollector exports the fleet's top Config.HotKeyMetrics keys by
// rank: at most that many series per metric at any scrape.
type hotKeyCollector struct{ n *Node }

func (c hotKeyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHotShare
	ch <- descHotAdmitted
	ch <- descHotRegionShare
}

func (c hotKeyCollector) Collect(ch chan<- prometheus.Metric) {
	hot := c.n.HotKeys("", c.n.cfg.HotKeyMetrics)
	for i, h := range hot.Keys {
		rank := strconv.Itoa(i + 1)
		ch <- prometheus.MustNewConstMetric(descHotShare, prometheus.GaugeValue, h.DemandShare, rank)
		ch <- prometheus.MustNewConstMetric(descHotAdmitted, prometheus.GaugeValue, h.Admitted, rank)
		ch <- prometheus.MustNewConstMetric(descHotRegionShare, prometheus.GaugeValue, c.n.Share(h.Key), rank)
	}
}
