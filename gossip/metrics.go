package gossip

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descAge = prometheus.NewDesc("quota_gossip_age_seconds",
		"Seconds since the last gossip digest from a region.", []string{"region"}, nil)
	descFrozen = prometheus.NewDesc("quota_gossip_frozen",
		"1 while shares are frozen because a region is stale (or the node is warming up).", nil, nil)
	descKeys = prometheus.NewDesc("quota_gossip_keys",
		"Keys with gossiped shares.", nil, nil)
	descBytes = prometheus.NewDesc("quota_gossip_digest_bytes",
		"Size of the last digest published.", nil, nil)
	descBad = prometheus.NewDesc("quota_gossip_bad_digests_total",
		"Digests rejected by the decoder.", nil, nil)
	descRejected = prometheus.NewDesc("quota_gossip_rejected_digests_total",
		"Well-formed digests refused: reason=\"subject_mismatch\" (region or process not the subject's), reason=\"unknown_region\" (region not in the configured region set), reason=\"epoch_out_of_range\" (epoch more than one interval ahead or StaleAfter behind), reason=\"too_many_processes\" (a new process of a region that has its MaxProcesses), reason=\"conflicting_digest\" (a second, different digest of one process for one epoch: a forgery, merged conservatively).",
		[]string{"reason"}, nil)
	descDropped = prometheus.NewDesc("quota_gossip_dropped_keys_total",
		"Keys of stored digests left out of the shares: reason=\"process_cap\" (beyond MaxKeys in one digest), reason=\"region_cap\" (beyond MaxRegionKeys of one region, counted at every tick).",
		[]string{"reason"}, nil)
	descEvicted = prometheus.NewDesc("quota_gossip_evicted_processes_total",
		"Processes of a full region (MaxProcesses) dropped, having missed the last epoch, to make room for a new one: someone publishes as processes the region does not run, or the region runs more than MaxProcesses.", nil, nil)
	descChanges = prometheus.NewDesc("quota_gossip_share_changes_total",
		"Share changes reported to the limiter (OnChange): keys whose share for this region moved by the change threshold or more.", nil, nil)
)

// collector reads the Node's state at scrape time.
type collector struct{ n *Node }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAge
	ch <- descFrozen
	ch <- descKeys
	ch <- descBytes
	ch <- descBad
	ch <- descRejected
	ch <- descDropped
	ch <- descEvicted
	ch <- descChanges
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.n.Snapshot()
	for _, r := range s.Regions {
		if r.Age >= 0 {
			ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, r.Age.Seconds(), r.Name)
		}
	}
	frozen := 0.0
	if s.Frozen {
		frozen = 1
	}
	ch <- prometheus.MustNewConstMetric(descFrozen, prometheus.GaugeValue, frozen)
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(len(s.Keys)))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(s.DigestBytes))
	ch <- prometheus.MustNewConstMetric(descBad, prometheus.CounterValue, float64(s.BadDigests))
	for reason, v := range s.RejectedDigests {
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(v), reason)
	}
	for reason, v := range s.DroppedKeys {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(v), reason)
	}
	ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(s.EvictedProcesses))
	ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(s.ShareChanges))
}
