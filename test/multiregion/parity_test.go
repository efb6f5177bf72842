package multiregion

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// exampleEndpoints are the example service's two endpoints with their
// weights in the catalogue (examples/weighted-api): a quote costs 1, a
// report 5. Every region's clients send them, the daemons' as checks of
// those endpoint names.
var exampleEndpoints = []Endpoint{
	{Name: exampleQuote, Cost: 1, Weight: 0.8},
	{Name: exampleReport, Cost: 5, Weight: 0.2},
}

// TestExampleServiceParity runs one region's processes as the example
// service (a Go API embedding a participant, examples/weighted-api) beside
// daemons in the other regions, and holds it to the scenarios' assertions:
// accuracy against the limit in steady traffic, degraded mode through a
// Redis kill in the service's own region (every such answer flagged with
// X-Ratelimit-Degraded, a closed plan rejecting, back on the store within
// 2 s), and the ledger equal to what its clients saw allowed, key by key
// and process by process.
func TestExampleServiceParity(t *testing.T) {
	mode := requireMode(t)
	const region = "ap"
	spec := scenarioSpec(mode)
	spec.ExampleRegion = region
	c := startScenarioCluster(t, spec)
	for _, e := range exampleEndpoints {
		c.SetCost(e.Name, e.Cost)
	}
	steady := scenario{
		name:    "example-steady",
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
	}
	killed := redisKilled(region)
	killed.name = "example-redis-killed"
	for _, sc := range []scenario{steady, killed} {
		sc.endpoints = exampleEndpoints
		own := sc.check
		sc.check = func(s *scenarioRun, rec *Record, f *Figures) {
			if own != nil {
				own(s, rec, f)
			}
			exampleServed(s, rec, f, region)
		}
		t.Run(sc.name, func(t *testing.T) {
			runScenario(t, c, mode, sc)
			if t.Failed() {
				for _, n := range c.Region(region).Nodes() {
					t.Logf("%s log:\n%s", n.Name(), n.Log(30))
				}
			}
		})
	}
}

// exampleServed checks that the example service took its region's
// traffic: each of its processes allowed cost that its clients saw and
// that the ledger holds (ledger exactness is checked per process by the
// scenario), and it names what they allowed, degraded included.
func exampleServed(s *scenarioRun, rec *Record, f *Figures, region string) {
	allowed, degraded := rec.AllowedByProcess(), rec.DegradedByProcess()
	var parts []string
	ok := true
	for _, n := range s.c.Region(region).Nodes() {
		if !n.Example {
			ok = false
			parts = append(parts, n.Name()+" is not the example service")
			continue
		}
		var a, d int64
		for _, v := range allowed[n.ID()] {
			a += v
		}
		for _, v := range degraded[n.ID()] {
			d += v
		}
		ok = ok && a > 0
		parts = append(parts, fmt.Sprintf("%s allowed %d (%d degraded)", n.ID(), a, d))
	}
	sort.Strings(parts)
	f.check(fmt.Sprintf("%s's processes are the example service and serve its traffic", region), ok,
		strings.Join(parts, ", "), "> 0 allowed each")
}
