package multiregion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// ErrNoPrometheus is returned by StartPrometheus when the prometheus binary
// (Debian package prometheus) is not installed.
var ErrNoPrometheus = errors.New("multiregion: prometheus is not installed (Debian package prometheus)")

// PromTarget is one process Prometheus scrapes, with the labels its series
// get (job, region, node).
type PromTarget struct {
	Addr   string // host:port of its /metrics
	Labels map[string]string
}

// Prometheus is a real Prometheus server scraping the cluster every second,
// as an operator's would: the report draws plots from its queries beside
// the clients' figures.
type Prometheus struct {
	URL    string
	client *http.Client
}

// PromTargets lists every limiter (job quota-limiter, labels region and
// node) and the reconciler (job quota-reconciler).
func (c *Cluster) PromTargets() []PromTarget {
	var out []PromTarget
	for _, n := range c.Nodes() {
		out = append(out, PromTarget{Addr: n.listen, Labels: map[string]string{"job": "quota-limiter", "region": n.Region, "node": n.Name()}})
	}
	recon := strings.TrimPrefix(c.reconURL, "http://")
	return append(out, PromTarget{Addr: recon, Labels: map[string]string{"job": "quota-reconciler"}})
}

// StartPrometheus starts prometheus in dir scraping targets every second,
// waits until it is ready, and stops it when t ends. It returns
// ErrNoPrometheus when the binary is missing.
func StartPrometheus(t testing.TB, targets []PromTarget, dir string) (*Prometheus, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, ErrNoPrometheus
	}
	byJob := map[string][]PromTarget{}
	var jobs []string
	for _, tg := range targets {
		j := tg.Labels["job"]
		if _, ok := byJob[j]; !ok {
			jobs = append(jobs, j)
		}
		byJob[j] = append(byJob[j], tg)
	}
	var conf strings.Builder
	conf.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\nscrape_configs:\n")
	for _, j := range jobs {
		fmt.Fprintf(&conf, "  - job_name: %q\n    static_configs:\n", j)
		for _, tg := range byJob[j] {
			fmt.Fprintf(&conf, "      - targets: [%q]\n        labels:\n", tg.Addr)
			names := make([]string, 0, len(tg.Labels))
			for k := range tg.Labels {
				if k != "job" {
					names = append(names, k)
				}
			}
			sort.Strings(names)
			for _, k := range names {
				fmt.Fprintf(&conf, "          %s: %q\n", k, tg.Labels[k])
			}
		}
	}
	dir = filepath.Join(dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		return nil, err
	}
	listen := hostPort(testserver.FreePort(t))
	p := newProc("prometheus", bin, dir, []string{"--config.file=" + confPath, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + listen, "--storage.tsdb.retention.time=1d", "--log.level=warn"}, nil)
	if err := p.start(); err != nil {
		return nil, fmt.Errorf("multiregion: start prometheus: %w", err)
	}
	t.Cleanup(func() { _ = p.stop(10 * time.Second) })
	prom := &Prometheus{URL: "http://" + listen, client: &http.Client{Timeout: 10 * time.Second}}
	testserver.WaitFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if err := p.exited(); err != nil {
			t.Fatalf("multiregion: prometheus exited: %v (log: %s)", err, p.tail(10))
		}
		resp, err := prom.client.Get(prom.URL + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("prometheus /-/ready: %s", resp.Status)
		}
		return nil
	})
	return prom, nil
}

// PromSeries is one series of a range query: its labels and one value per
// step (NaN where Prometheus had none).
type PromSeries struct {
	Labels map[string]string
	Values []float64
}

// QueryRange evaluates query over [start, end] every step and returns its
// series, each with len = (end-start)/step + 1 values.
func (p *Prometheus) QueryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]PromSeries, error) {
	q := url.Values{}
	q.Set("query", query)
	q.Set("start", strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64))
	q.Set("end", strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64))
	q.Set("step", strconv.FormatFloat(step.Seconds(), 'f', 3, 64))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/query_range?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prometheus query %q: %w", query, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("prometheus query %q: %s: %w", query, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("prometheus query %q: %s", query, body.Error)
	}
	n := int(end.Sub(start)/step) + 1
	var out []PromSeries
	for _, r := range body.Data.Result {
		s := PromSeries{Labels: r.Metric, Values: make([]float64, n)}
		for i := range s.Values {
			s.Values[i] = math.NaN()
		}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			i := int((time.UnixMilli(int64(ts*1000)).Sub(start) + step/2) / step)
			if err == nil && i >= 0 && i < n {
				s.Values[i] = f
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i].Labels) < fmt.Sprint(out[j].Labels) })
	return out, nil
}

// promPlots draws, from Prometheus over [start, end], what an operator's
// dashboard shows for a run: the p99 of fast-path checks per region
// (quota_check_duration_seconds) and each region's share of the fleet's
// hottest key, which the caller names as key (quota_hotkey_region_share of
// rank 1; the limiters run with --hotkey-metrics). It returns the plots
// and a note per query that gave nothing.
func promPlots(ctx context.Context, p *Prometheus, name, key string, start, end time.Time, bands [][2]float64) ([]Plot, []string) {
	var plots []Plot
	var notes []string
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"}
	for _, q := range []struct {
		title, file, yLabel, query string
		scale                      float64
	}{
		{name + ": p99 of fast-path checks per region, from Prometheus", name + "-prom-p99.svg", "ms",
			`histogram_quantile(0.99, sum by (le, region) (rate(quota_check_duration_seconds_bucket{job="quota-limiter",path="fast"}[5s])))`, 1000},
		{name + ": each region's share of " + key + ", from Prometheus", name + "-prom-shares.svg", "share",
			`max by (region) (quota_hotkey_region_share{job="quota-limiter",rank="1"})`, 1},
	} {
		series, err := p.QueryRange(ctx, q.query, start, end, time.Second)
		if err != nil || len(series) == 0 {
			notes = append(notes, fmt.Sprintf("Prometheus had nothing for %s (%v)", q.title, err))
			continue
		}
		var lines []svgSeries
		for i, s := range series {
			pts := make([]float64, len(s.Values))
			for j, v := range s.Values {
				switch {
				case !math.IsNaN(v) && !math.IsInf(v, 0):
					pts[j] = v * q.scale
				case j > 0:
					pts[j] = pts[j-1]
				}
			}
			lines = append(lines, svgSeries{Name: s.Labels["region"], Color: colors[i%len(colors)], Points: pts})
		}
		plots = append(plots, Plot{Title: q.title, File: q.file, SVG: svgPlot(q.title, q.yLabel, lines, bands)})
	}
	return plots, notes
}

// WithPrometheus starts a Prometheus scraping every process of c for the
// rest of the test (the limiters need --hotkey-metrics for the shares
// plot). It fails the test when prometheus is not installed.
func (c *Cluster) WithPrometheus(t testing.TB) {
	t.Helper()
	p, err := StartPrometheus(t, c.PromTargets(), c.dir)
	if err != nil {
		t.Fatalf("%v: install it (apt-get install -y prometheus; .ci/run does)", err)
	}
	c.prom = p
}

// HottestKey asks a live limiter's GET /v1/hotkeys (the control-plane
// limiter's, unless a scenario crashed it: every process merges the same
// digests) for the fleet's hottest key (rank 1 of the hot-key metrics).
func (c *Cluster) HottestKey() (string, error) {
	var n *Node
	for _, m := range c.Nodes() {
		if !m.Crashed() {
			n = m
			break
		}
	}
	if n == nil {
		return "", errors.New("GET /v1/hotkeys: no live limiter")
	}
	req, err := http.NewRequest(http.MethodGet, n.URL()+"/v1/hotkeys?k=1", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.spec.AdminToken)
	resp, err := c.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body struct {
		Keys []struct {
			Key string `json:"key"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /v1/hotkeys: %s %v", resp.Status, err)
	}
	if len(body.Keys) == 0 {
		return "", errors.New("GET /v1/hotkeys: no keys")
	}
	return body.Keys[0].Key, nil
}
