package multiregion

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quotaplatform/quota/internal/testserver"
)

// The harness's Prometheus scrapes its targets with their labels, and a
// range query returns what they exported, step by step.
func TestPrometheusScrapesAndQueries(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "quota_test_value", Help: "x"})
	reg.MustRegister(g)
	g.Set(42)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	addr := srv.Listener.Addr().(*net.TCPAddr)

	start := time.Now()
	p, err := StartPrometheus(t, []PromTarget{{Addr: addr.String(), Labels: map[string]string{"job": "quota-limiter", "region": "eu", "node": "eu/0"}}}, t.TempDir())
	if errors.Is(err, ErrNoPrometheus) {
		t.Fatal(err) // make test needs it: .ci/run installs the package
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testserver.WaitFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		series, err := p.QueryRange(ctx, `max by (region, node) (quota_test_value{job="quota-limiter"})`, start, time.Now(), time.Second)
		if err != nil {
			return err
		}
		if len(series) != 1 || series[0].Labels["region"] != "eu" || series[0].Labels["node"] != "eu/0" {
			return fmt.Errorf("series %+v, want one of region eu, node eu/0", series)
		}
		last := series[0].Values[len(series[0].Values)-1]
		if last != 42 {
			return fmt.Errorf("last value %v, want 42", last)
		}
		return nil
	})
	if _, err := p.QueryRange(ctx, `quota_test_value{`, start, time.Now(), time.Second); err == nil {
		t.Fatal("a bad query returned no error")
	}
}
