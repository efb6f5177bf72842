package multiregion

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/rls"
)

// The rate limit service's rules of the gRPC scenario: each value of the
// descriptor key "key" is its own limit of grpcRate per second (a token
// bucket of rate grpcRate and capacity grpcRate), and the probe's
// descriptor is far above its demand, so that it is decided from leases.
const (
	grpcDomain = "multiregion"
	grpcRate   = 40
)

func grpcRules(rate int) string {
	return fmt.Sprintf(`domain: %s
descriptors:
  - key: key
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: probe
    rate_limit: {unit: second, requests_per_unit: 1000000}
`, grpcDomain, rate)
}

// A limiter key of the rules reads back into the descriptor it was made
// of; one that cannot is refused by GRPCKey, not sent.
func TestGRPCKey(t *testing.T) {
	cfg, err := rls.ParseDomain(grpcDomain, []byte(grpcRules(grpcRate)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, key, value string
		ok               bool
	}{
		{"plain value", "key", "grpc-steady-k-0", true},
		{"value with reserved bytes", "key", "acct:1/ü=x,y", true},
		{"probe rule", "probe", "latency", true},
		{"no rule", "other", "a", false},
		{"hashed: too long", "key", strings.Repeat("x", 300), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, err := GRPCKey(cfg, grpcDomain, c.key, c.value)
			if (err == nil) != c.ok {
				t.Fatalf("GRPCKey = %q, %v; want ok %v", k, err, c.ok)
			}
			if !c.ok {
				return
			}
			d, e, err := descriptorOf(k)
			if err != nil || d != grpcDomain || len(e) != 1 || e[0].Key != c.key || e[0].Value != c.value {
				t.Fatalf("descriptorOf(%q) = %s %v %v", k, d, e, err)
			}
		})
	}
	for _, k := range []string{"acct_1", "rls:abc", "rls:abc:d:#0123", "rls:abc:d:novalue"} {
		if _, _, err := descriptorOf(k); err == nil {
			t.Errorf("descriptorOf(%q): no error", k)
		}
	}
}

// TestGRPCScenario drives the steady scenario over Envoy's rate limit
// service: 2 regions × 2 daemons serving ShouldRateLimit on rules stored
// in the catalogue (PUT /v1/rls on the control plane, pushed to every
// region), Zipf keys with the busiest above its limit, three costs as
// hits_addend, and the probe over gRPC. It keeps the scenarios'
// assertions: admitted ≤ 1.01 × limit (whole run and worst window), no
// failed call, the wrongly rejected share (gated in the full form), and the
// ledger's spent and degraded equal to what the clients saw, per process
// and key. About 60 s in the short form on two cores.
func TestGRPCScenario(t *testing.T) {
	mode := requireMode(t)
	spec := DefaultSpec()
	spec.Regions = []string{"eu", "us"}
	spec.Weights = map[string]float64{"eu": 0.6, "us": 0.4}
	spec.GRPC = true
	spec.ExtraFlags = append(spec.ExtraFlags, "--rls-config", "catalog:", "--rls-response-headers")
	c := Start(t, spec)

	rules := grpcRules(grpcRate)
	cfg, err := rls.ParseDomain(grpcDomain, []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	key := func(descriptor, value string) string {
		k, err := GRPCKey(cfg, grpcDomain, descriptor, value)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	c.SetRLS(grpcDomain, rules, 20*time.Second)
	c.WaitRLS(30*time.Second, key("key", "harness-ready"), grpcRate)

	name := "grpc-steady"
	prefix := key("key", name+"-") // every scenario key starts with it; the ledger is read by it
	D := 20 * time.Second
	if mode == ModeFull {
		D = 60 * time.Second
	}
	keys := ZipfKeys(name+"-k", 12, zipfS, zipfTop)
	plans := map[string][]PlanPhase{}
	for i := range keys {
		keys[i].Key = key("key", keys[i].Key)
		plans[keys[i].Key] = []PlanPhase{{Rate: grpcRate, Capacity: grpcRate}}
	}
	c.WaitConverged(30 * time.Second)

	tr := Traffic{Keys: keys, Endpoints: endpoints, Duration: D, GRPC: true,
		Probe: key("probe", name), WatchShares: []string{keys[0].Key}}
	g, err := NewGenerator(c, tr)
	if err != nil {
		t.Fatal(err)
	}
	g.Start()
	rec := g.Wait()

	f := &Figures{Scenario: name, Mode: mode, Duration: rec.end.Sub(rec.start)}
	f.Setup = fmt.Sprintf("%d regions × %d processes, every check a ShouldRateLimit of one descriptor (Envoy's rate limit service, --grpc-listen) with its cost as hits_addend; "+
		"rules from the catalogue (PUT /v1/rls/%s, --rls-config catalog:): %d Zipf keys (s = %g, busiest %v cost/s), each value of descriptor \"key\" %d/second (rate %d, capacity %d), endpoints %s; a run of %v.",
		len(spec.Regions), spec.Processes, grpcDomain, len(keys), zipfS, zipfTop, grpcRate, grpcRate, grpcRate, describeEndpoints(endpoints), D)
	tot := rec.Totals()
	f.Decisions, f.AllowedCost, f.DegradedCost = tot.Decisions, tot.Allowed, tot.Degraded
	f.DemandCost = tot.Allowed + tot.Rejected
	f.accuracy(rec, plans)
	f.wrongRejections(rec, plans)
	f.Failed, f.LostInCrash, f.FirstFailures = rec.Failures()
	f.P50, _ = rec.Latency(0.50)
	f.P99, f.P99PerCheck = rec.Latency(0.99)
	f.FastP50, _ = rec.ProbeLatency(0.50)
	f.FastP99, f.FastN = rec.ProbeLatency(0.99)

	var topRejected int64
	for _, cell := range rec.Series(keys[0].Key)[""] {
		topRejected += cell.Rejected
	}
	f.check("the busiest key was held to its limit (rejections seen)", topRejected > 0,
		fmt.Sprintf("%d cost rejected of %s", topRejected, keys[0].Key), "> 0")
	f.Bound = 1.01 * f.Limit
	f.check("admitted / limit, worst key, whole run", f.AccuracyRatio <= 1.01,
		fmt.Sprintf("%.4f (%s: %.0f of %.0f)", f.AccuracyRatio, f.AccuracyKey, f.Admitted, f.Limit), "≤ 1.01")
	f.check(fmt.Sprintf("admitted / limit, worst %d s window", f.WindowLen), f.WindowRatio <= 1.01,
		fmt.Sprintf("%.4f (%s, from second %d)", f.WindowRatio, f.WindowKey, f.WindowStart), "≤ 1.01")
	f.check("wrongly rejected (keys under their limit)", f.WrongRejectPct <= 1,
		fmt.Sprintf("%.3f %% (%d of %d, %d keys)", f.WrongRejectPct, f.UnderRejected, f.UnderDemand, f.UnderKeys), "≤ 1 %")
	f.check("failed API calls", f.Failed == 0, fmt.Sprintf("%d checks", f.Failed), "0")
	f.checkLedger(c.CompareLedger(rec, prefix, nil, 30*time.Second), "live processes")
	f.Notes = append(f.Notes, fmt.Sprintf("%d decisions over gRPC: p50 %.2f ms, p99 %.2f ms per call, client side; the probe (decided from leases) p50 %.2f ms, p99 %.2f ms over %d calls.",
		f.Decisions, float64(f.P50)/1e6, float64(f.P99)/1e6, float64(f.FastP50)/1e6, float64(f.FastP99)/1e6, f.FastN))
	if f.DegradedCost > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("%d cost was allowed in degraded mode with no fault injected (store calls over --store-timeout on this loaded machine), flagged to the clients by X-Ratelimit-Degraded.", f.DegradedCost))
	}
	addReport(f)
	gateChecks(t, name, mode, f, rec, false)
}
