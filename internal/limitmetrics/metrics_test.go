package limitmetrics_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quotaplatform/quota/internal/limitmetrics"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

type fakeConfig struct{}

func (fakeConfig) Version() uint64 { return 42 }
func (fakeConfig) Synced() bool    { return true }

// value returns the value of the series of name whose labels include want.
func value(t *testing.T, fams []*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == k && lp.GetValue() == v)
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, want)
	return 0
}

func TestMetrics(t *testing.T) {
	obs := limitmetrics.NewObserver()
	cfg := region.DefaultConfig()
	cfg.Observer = obs
	lim, err := region.New(memstore.New(nil), region.StaticPlans{Default: region.Plan{Rate: 1, Capacity: 2}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := lim.Allow(context.Background(), "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	obs.StoreCall(time.Millisecond, 1, 0, errors.New("boom"))
	obs.BreakerState(region.BreakerOpen)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(obs, limitmetrics.NewCollector(lim, fakeConfig{}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"quota_decisions_total", map[string]string{"result": "allowed"}, 2},
		{"quota_decisions_total", map[string]string{"result": "rejected"}, 1},
		{"quota_config_version", nil, 42},
		{"quota_config_synced", nil, 1},
		{"quota_tracked_keys", nil, 1},
		{"quota_degraded", nil, 0},
		{"quota_store_calls_total", map[string]string{"result": "error"}, 1},
		{"quota_breaker_transitions_total", map[string]string{"state": "open"}, 1},
	}
	for _, tt := range tests {
		if got := value(t, fams, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if got := value(t, fams, "quota_store_call_duration_seconds", nil); got < 2 {
		t.Errorf("store latency samples = %v", got)
	}
	if got := value(t, fams, "quota_store_calls_total", map[string]string{"result": "ok"}); got < 1 {
		t.Errorf("ok store calls = %v", got)
	}
}

func TestChecks(t *testing.T) {
	c := limitmetrics.NewChecks()
	for _, p := range []region.Path{region.PathFast, region.PathFast, region.PathSlow, region.PathDegraded, region.Path(99)} {
		c.ObserveCheck(p, 30*time.Microsecond)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]float64{"fast": 2, "slow": 1, "degraded": 1} {
		if got := value(t, fams, "quota_check_duration_seconds", map[string]string{"path": path}); got != want {
			t.Errorf("checks on the %s path = %v, want %v", path, got, want)
		}
	}
}

// nopWriter is a ResponseWriter that keeps nothing.
type nopWriter struct{ h http.Header }

func (w nopWriter) Header() http.Header         { return w.h }
func (w nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w nopWriter) WriteHeader(int)             {}

// Requests are counted by route and code, and timed by route; once a route
// and code have been seen, counting allocates nothing.
func TestHTTP(t *testing.T) {
	m := limitmetrics.NewHTTP()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/allow", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("bad") {
			w.WriteHeader(http.StatusBadRequest)
		}
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /flush", func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).Flush(); err == nil || !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("Flush through the wrapper: %v, want the writer's own answer", err)
		}
		w.WriteHeader(http.StatusAccepted)
	})
	h := m.Wrap(mux)
	w := nopWriter{h: http.Header{}}
	serve := func(method, target string) {
		h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	}
	for range 3 {
		serve("POST", "/v1/allow")
	}
	serve("POST", "/v1/allow?bad")
	serve("GET", "/flush")
	serve("GET", "/nowhere")

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		route, code string
		want        float64
	}{
		{"POST /v1/allow", "200", 3},
		{"POST /v1/allow", "400", 1},
		{"GET /flush", "202", 1},
		{"unmatched", "404", 1},
	} {
		if got := value(t, fams, "quota_http_requests_total", map[string]string{"route": tt.route, "code": tt.code}); got != tt.want {
			t.Errorf("requests %s %s = %v, want %v", tt.route, tt.code, got, tt.want)
		}
	}
	if got := value(t, fams, "quota_http_request_duration_seconds", map[string]string{"route": "POST /v1/allow"}); got != 4 {
		t.Errorf("timed requests of POST /v1/allow = %v, want 4", got)
	}

	if raceEnabled {
		return
	}
	r := httptest.NewRequest("POST", "/v1/allow", nil)
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { r.Pattern = "POST /v1/allow" })
	wrapped := m.Wrap(bare)
	wrapped.ServeHTTP(w, r)
	if n := testing.AllocsPerRun(1000, func() { wrapped.ServeHTTP(w, r) }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}
