package gossip

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/limit"
)

// HotKeys merges the latest digests of every process: a key at 80 % of the
// fleet's demand, served in two regions, comes first with its demand summed
// over the processes and its share of the total; a region filter counts
// only that region's processes; and the metrics carry at most
// HotKeyMetrics keys.
func TestHotKeysMergeDigests(t *testing.T) {
	reg := prometheus.NewRegistry()
	ls := newLockstep(t, func(c *Config) {
		c.HalfLife = c.Interval / 100 // demand follows the last interval
		if c.Region == "eu" && c.Process == "p1" {
			c.Registerer, c.HotKeyMetrics = reg, 2
		}
	}, [2]string{"eu", "p1"}, [2]string{"eu", "p2"}, [2]string{"us", "p1"})
	// Per interval (1 s): hot 80 cost units over the three processes,
	// cold-0 … cold-3 5 each on one process.
	for range 5 {
		for i, n := range ls.nodes {
			n.Record([]limit.Usage{{Key: "hot", Spent: []int64{40, 20, 15}[i], Rejected: []int64{0, 0, 5}[i]}})
		}
		ls.nodes[0].Record([]limit.Usage{{Key: "cold-0", Spent: 5}, {Key: "cold-1", Spent: 5}})
		ls.nodes[1].Record([]limit.Usage{{Key: "cold-2", Spent: 5}})
		ls.nodes[2].Record([]limit.Usage{{Key: "cold-3", Spent: 5}})
		ls.step("none", []float64{0, 0, 0}, nil)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= 0.02*want }

	all := ls.nodes[0].HotKeys("", 3)
	if all.Processes != 3 || !near(all.Demand, 100) || len(all.Keys) != 3 {
		t.Fatalf("HotKeys(all) = %+v, want 3 processes, demand 100, 3 keys", all)
	}
	hot := all.Keys[0]
	if hot.Key != "hot" || hot.Processes != 3 || !near(hot.Demand, 80) || !near(hot.Admitted, 75) || !near(hot.DemandShare, 0.8) {
		t.Fatalf("hottest = %+v, want hot: demand 80, admitted 75, share 0.8, 3 processes", hot)
	}
	if all.Keys[1].Key != "cold-0" || all.Keys[2].Key != "cold-1" {
		t.Fatalf("ties not by key: %+v", all.Keys)
	}
	us := ls.nodes[0].HotKeys("us", 10)
	if us.Processes != 1 || !near(us.Demand, 25) || len(us.Keys) != 2 || us.Keys[0].Key != "hot" || !near(us.Keys[0].DemandShare, 0.8) {
		t.Fatalf("HotKeys(us) = %+v, want one process, demand 25, hot at 0.8 then cold-3", us)
	}
	if none := ls.nodes[0].HotKeys("eu", 0); len(none.Keys) != 0 {
		t.Fatalf("HotKeys(k=0) = %+v", none)
	}

	if n := testutil.CollectAndCount(reg, "quota_hotkey_demand_share"); n != 2 {
		t.Fatalf("%d quota_hotkey_demand_share series, want HotKeyMetrics = 2", n)
	}
	want := `
# HELP quota_hotkey_demand_share Part of the fleet's gossiped demand taken by each of its hottest keys, by rank from 1 (which key: GET /v1/hotkeys).
# TYPE quota_hotkey_demand_share gauge
quota_hotkey_demand_share{rank="1"} 0.8
quota_hotkey_demand_share{rank="2"} 0.05
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "quota_hotkey_demand_share"); err != nil {
		t.Fatal(err)
	}
	// Rank 1's region share is eu's share of hot in the node's own table
	// (eu's 60 of 80).
	if got, want := testutil.ToFloat64(hotShareOf(t, reg)), ls.nodes[0].Share("hot"); got != want || !near(got, 0.75) {
		t.Fatalf("quota_hotkey_region_share{rank=1} = %v, want the node's share of hot %v (about 0.75)", got, want)
	}
}

func TestHotKeyMetricsBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Region, cfg.Process, cfg.Regions = "eu", "p1", []string{"eu"}
	cfg.HotKeyMetrics = 101
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "HotKeyMetrics") {
		t.Fatalf("validate(HotKeyMetrics 101) = %v, want an error naming HotKeyMetrics", err)
	}
}

// hotShareOf returns the quota_hotkey_region_share series of rank 1.
func hotShareOf(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "quota_hotkey_region_share" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rank" && l.GetValue() == "1" {
					return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 { return m.GetGauge().GetValue() })
				}
			}
		}
	}
	t.Fatal("no quota_hotkey_region_share series of rank 1")
	return nil
}
