package gossip

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/internal/testserver"
)

func TestMetrics(t *testing.T) {
	srv := testserver.StartNATS(t)
	reg := prometheus.NewRegistry()
	eu := startNode(t, srv.URL, euUS, "eu", "p1", func(c *Config) { c.Registerer = reg })
	us := startNode(t, srv.URL, euUS, "us", "p1", nil)
	ready(t, 2, eu, us)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	var frozen float64 = -1
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
		if mf.GetName() == "quota_gossip_frozen" {
			frozen = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	want := map[string]int{"quota_gossip_age_seconds": 2, "quota_gossip_frozen": 1, "quota_gossip_keys": 1,
		"quota_gossip_digest_bytes": 1, "quota_gossip_bad_digests_total": 1, "quota_gossip_share_changes_total": 1,
		"quota_gossip_evicted_processes_total": 1,
		"quota_gossip_rejected_digests_total":  int(numReasons), "quota_gossip_dropped_keys_total": int(numDrops)}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %d series, want %d (all: %v)", name, got[name], n, got)
		}
	}
	if frozen != 0 {
		t.Errorf("quota_gossip_frozen = %v, want 0", frozen)
	}
}
