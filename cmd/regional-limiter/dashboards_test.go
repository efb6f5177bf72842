package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/deploy/grafana"
)

// Every quota_ metric the Grafana dashboards (deploy/grafana) and the alert
// rules (deploy/prometheus/quota-rules.yaml) name, except the reconciler's
// (cmd/reconciler checks those), is exported by a live daemon on embedded
// defaults: in its /metrics after a few checks, or, for a vector with no
// series yet, described by a collector in the registry behind /metrics.
func TestDashboardMetricsExported(t *testing.T) {
	names, err := grafana.MonitoredNames("../../deploy/prometheus/quota-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var reg *prometheus.Registry
	o := testOptions(t, "", "", t.TempDir())
	o.HotKeyMetrics = 3 // the hot-key panels' metrics (limiter.hotkey_metrics in the deploy)
	d := startDaemon(t, o, fx.Populate(&reg))
	for range 3 {
		d.mustCall(t, "POST", "/v1/allow", `{"key":"dashboards_1"}`, false, 200)
	}
	m := d.mustCall(t, "GET", "/metrics", "", false, 200)
	e := grafana.Exporter{Scrape: m.raw, Registry: reg}

	// quota_reconciler_, and quota_billing_, quota_sink_ and
	// quota_ledger_retention_ (written by reconciler events, stripe-sync and
	// retention): cmd/reconciler checks them.
	limiters := func(n string) bool {
		for _, p := range []string{"quota_reconciler_", "quota_billing_", "quota_sink_", "quota_ledger_retention_"} {
			if strings.HasPrefix(n, p) {
				return false
			}
		}
		return true
	}
	missing, byRegistry := e.Missing(names, limiters)
	for _, n := range missing {
		t.Errorf("not exported by the regional limiter: %s", n)
	}
	t.Logf("found in the registry only (no series yet): %v", byRegistry)

	// The check can fail: a renamed metric, a histogram suffix on a
	// counter, and a name the registry does not hold are all missing.
	for _, n := range []string{"quota_decisions_renamed_total", "quota_decisions_total_count", "quota_gossip_age"} {
		if got := e.Lookup(n); got != "" {
			t.Errorf("Lookup(%s) = %q, want not exported", n, got)
		}
	}
	if got := e.Lookup("quota_check_duration_seconds_bucket"); got != "scrape" {
		t.Errorf("Lookup(quota_check_duration_seconds_bucket) = %q, want scrape", got)
	}
}
