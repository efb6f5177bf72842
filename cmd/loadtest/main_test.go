package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// staticCatalog answers every key with one plan; writes are not needed.
type staticCatalog struct{ limitapi.Catalog }

func (staticCatalog) Resolve(string) (string, region.Plan, error) {
	return "default", region.Plan{Rate: 1e6, Capacity: 1e6}, nil
}

func TestRunSmoke(t *testing.T) {
	const tok = "check-0123456789abcdef"
	for _, tt := range []struct {
		name           string
		daemon, client string // the daemon's check token, the one sent
	}{
		{"open check API", "", ""},
		{"check token", tok, tok},
	} {
		t.Run(tt.name, func(t *testing.T) { runSmoke(t, tt.daemon, tt.client) })
	}
}

func runSmoke(t *testing.T, daemonToken, clientToken string) {
	plans := region.StaticPlans{Default: region.Plan{Rate: 1e6, Capacity: 1e6}}
	lim, err := region.New(memstore.New(nil), plans, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := limitapi.DefaultConfig()
	cfg.Limiter, cfg.Catalog = lim, staticCatalog{}
	if daemonToken != "" {
		cfg.CheckTokens = []string{daemonToken}
	}
	api, err := limitapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {})
	// The daemon's Go collector: the report's allocation per decision.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var out bytes.Buffer
	c := config{url: srv.URL, duration: 150 * time.Millisecond, concurrency: 2, batch: 10, keys: 50, mode: "both", half: true,
		wait: time.Second, checkToken: clientToken}
	if err := run(c, &out); err != nil {
		t.Fatal(err)
	}
	for _, phase := range []string{"single ", "single @50%", "batch(10) ", "batch(10) @50%"} {
		if !strings.Contains(out.String(), phase) {
			t.Errorf("report lacks %q:\n%s", phase, out.String())
		}
	}
	if n := strings.Count(out.String(), "B/dec"); n != 4 {
		t.Errorf("allocation per decision in %d of 4 phases:\n%s", n, out.String())
	}
	if strings.Contains(out.String(), "first error") {
		t.Errorf("errors:\n%s", out.String())
	}
}
