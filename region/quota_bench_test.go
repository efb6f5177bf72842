package region_test

import (
	"testing"

	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region"
)

// quotaBenchPlans are a plan without quotas and the same plan with a
// month and a day quota that the benchmark never reaches.
func quotaBenchPlans(b *testing.B, rate float64) map[string]region.Plan {
	b.Helper()
	qs, err := region.NewQuotas([]region.Quota{{Period: period.Month, Limit: 1e15}, {Period: period.Day, Limit: 1e14}})
	if err != nil {
		b.Fatal(err)
	}
	return map[string]region.Plan{
		"no-quotas": {Rate: rate, Capacity: rate},
		"quotas":    {Rate: rate, Capacity: rate, Quotas: qs, TimeZone: "Europe/Paris"},
	}
}

// BenchmarkQuotaFastPath spends from a warm lease of a plan with quotas
// beside the same plan without, in the same run (docs/design.md [quotas]:
// a check under its quotas stays on the fast path).
func BenchmarkQuotaFastPath(b *testing.B) {
	for _, name := range []string{"no-quotas", "quotas"} {
		b.Run(name, func(b *testing.B) { benchWarmLease(b, quotaBenchPlans(b, 1e9)[name]) })
	}
}

// BenchmarkQuotaStoreCalls reports store calls per decision, and quota
// calls among them, for 10,000 keys at about 3 decisions per second each
// on a simulated clock (BenchmarkStoreCallsModerate's load), with and
// without quotas on the plan: what quotas add at steady state.
func BenchmarkQuotaStoreCalls(b *testing.B) {
	for _, name := range []string{"no-quotas", "quotas"} {
		b.Run(name, func(b *testing.B) {
			benchModerateLoad(b, quotaBenchPlans(b, 1000)[name],
				map[string]func(region.Stats) int64{"quota-calls/decision": func(s region.Stats) int64 { return s.QuotaCalls }})
		})
	}
}
