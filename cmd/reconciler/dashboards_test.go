package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/deploy/grafana"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger/sink"
)

// Every quota_reconciler_ metric the Grafana dashboards (deploy/grafana)
// and the alert rules (deploy/prometheus/quota-rules.yaml) name is exported
// by a live reconciler: in its /metrics, or, for a vector with no series
// yet (rejected reports, dead letters by reason), described by a collector
// in the registry behind /metrics. cmd/regional-limiter checks the rest.
func TestDashboardMetricsExported(t *testing.T) {
	names, err := grafana.MonitoredNames("../../deploy/prometheus/quota-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o := defaultOptions()
	o.NATS = testserver.StartNATS(t).URL
	o.Postgres = testserver.NewDatabase(t)
	o.Listen = fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	o.ShutdownDelay = 0
	var reg *prometheus.Registry
	app := fx.New(serveModule(o, slog.New(slog.DiscardHandler)), fx.Populate(&reg))
	start, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := app.Start(start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := app.Stop(stop); err != nil {
			t.Error(err)
		}
	})

	var scrape string
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		resp, err := http.Get("http://" + o.Listen + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("/metrics: %d %v", resp.StatusCode, err)
		}
		scrape = string(b)
		return nil
	})
	e := grafana.Exporter{Scrape: scrape, Registry: reg}

	reconciler := func(n string) bool { return strings.HasPrefix(n, "quota_reconciler_") }
	missing, byRegistry := e.Missing(names, reconciler)
	for _, n := range missing {
		t.Errorf("not exported by the reconciler: %s", n)
	}
	t.Logf("found in the registry only (no series yet): %v", byRegistry)
	n := 0
	for name := range names {
		if reconciler(name) {
			n++
		}
	}
	if n < 5 {
		t.Errorf("the dashboards and rules name %d reconciler metrics, want at least 5", n)
	}
	// quota_billing_ metrics are written by `reconciler events` into its
	// --metrics-file (node_exporter's textfile collector), not served.
	sinkReg := prometheus.NewRegistry()
	sink.NewMetrics(sinkReg)
	billing := func(n string) bool {
		return strings.HasPrefix(n, "quota_billing_") || strings.HasPrefix(n, "quota_sink_")
	}
	missing, _ = grafana.Exporter{Registry: sinkReg}.Missing(names, billing)
	for _, n := range missing {
		t.Errorf("not written by reconciler events: %s", n)
	}
	if got, _ := (grafana.Exporter{Registry: sinkReg}).Missing(map[string][]string{"quota_billing_renamed": nil}, billing); len(got) != 1 {
		t.Errorf("a renamed billing metric is not reported missing: %v", got)
	}
	// quota_ledger_retention_ metrics are written by `reconciler retention
	// --metrics-file`.
	file := filepath.Join(t.TempDir(), "retention.prom")
	if err := writeRetentionMetrics(file, []hold{{Partition: "usage_reports_p202601", Month: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Keys: 1, Credit: "5"}}, 0); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	retention := func(n string) bool { return strings.HasPrefix(n, "quota_ledger_retention_") }
	missing, _ = grafana.Exporter{Scrape: string(written)}.Missing(names, retention)
	for _, n := range missing {
		t.Errorf("not written by reconciler retention: %s", n)
	}
	if got := e.Lookup("quota_reconciler_consumer_lag"); got != "" {
		t.Errorf("Lookup(quota_reconciler_consumer_lag) = %q, want not exported", got)
	}
}
