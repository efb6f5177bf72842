package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/region"
)

const adminToken = "test-token"

// testOptions are the defaults with a free port, a temporary data dir and
// the given services.
func testOptions(t *testing.T, redisURL, natsURL, dataDir string) Options {
	t.Helper()
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.Listen = "127.0.0.1:0"
	o.Redis, o.NATSURL, o.DataDir, o.AdminToken = redisURL, natsURL, dataDir, adminToken
	if natsURL != "" {
		o.RegionList = o.Region // one region: required with --nats
	}
	o.ControlPlane = true // these tests write the catalogue through any daemon
	o.LogLevel = "warn"
	o.ShutdownDelay = 0
	// These tests are about wiring, not the store's latency: on a loaded CI
	// machine a Redis call can take over the 5 ms default, and a check
	// decided in degraded mode would not be charged to the shared bucket.
	o.Limiter.StoreTimeout = 2 * time.Second
	return o
}

type daemon struct {
	app  *fx.App
	srv  *httpServer
	cat  *catalog.Catalog
	base string
}

func startDaemon(t *testing.T, o Options, extra ...fx.Option) *daemon {
	t.Helper()
	d := &daemon{}
	d.app = fx.New(appOptions(o, testLogWriter{t}, extra...), fx.Populate(&d.srv, &d.cat), fx.NopLogger)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := d.app.Start(ctx); err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	d.base = "http://" + d.srv.Addr()
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *daemon) stop(t *testing.T) {
	if d.app == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := d.app.Stop(ctx); err != nil {
		t.Errorf("stop daemon: %v", err)
	}
	d.app = nil
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

type reply struct {
	status int
	header http.Header
	closed bool // the server answered Connection: close
	body   map[string]any
	raw    string
}

func (d *daemon) call(t *testing.T, method, path, body string, auth bool) reply {
	t.Helper()
	req, err := http.NewRequest(method, d.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, closed: resp.Close, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (d *daemon) mustCall(t *testing.T, method, path, body string, auth bool, status int) reply {
	t.Helper()
	r := d.call(t, method, path, body, auth)
	if r.status != status {
		t.Fatalf("%s %s %s: status %d, want %d: %s", method, path, body, r.status, status, r.raw)
	}
	return r
}

func TestValidateApp(t *testing.T) {
	o := testOptions(t, "", "", t.TempDir())
	if err := fx.ValidateApp(appOptions(o, io.Discard)); err != nil {
		t.Fatal(err)
	}
	o.Redis, o.NATSURL = "redis://127.0.0.1:1/0", "nats://127.0.0.1:1"
	if err := fx.ValidateApp(appOptions(o, io.Discard)); err != nil {
		t.Fatal(err)
	}
}

// deps lists the packages pkg imports, directly or not.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	path := "github.com/quotaplatform/quota/" + pkg
	out, err := exec.Command("go", "list", "-e", "-deps", "-f", "{{.ImportPath}}", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", path, err, out)
	}
	return strings.Fields(string(out))
}

// The library packages must work without fx, and partition is pure
// arithmetic: no network client.
func TestLibraryImports(t *testing.T) {
	banned := map[string][]string{
		"region":    {"go.uber.org/fx", "go.uber.org/dig"},
		"gossip":    {"go.uber.org/fx", "go.uber.org/dig"},
		"ledger":    {"go.uber.org/fx", "go.uber.org/dig"},
		"partition": {"go.uber.org/fx", "go.uber.org/dig", "net", "github.com/nats-io/", "github.com/redis/", "github.com/jackc/", "github.com/hashicorp/memberlist"},
	}
	for pkg, prefixes := range banned {
		for _, dep := range deps(t, pkg) {
			for _, p := range prefixes {
				if dep == p || strings.HasPrefix(dep, strings.TrimSuffix(p, "/")+"/") {
					t.Errorf("%s imports %s", pkg, dep)
				}
			}
		}
	}
}

// Two daemons share one Redis and one NATS: a plan change on one reaches
// the other within a second, and both spend the same regional bucket.
func TestEndToEnd(t *testing.T) {
	rs := testserver.StartRedis(t)
	ns := testserver.StartNATS(t)
	redisURL := "redis://" + rs.Addr + "/0"
	a := startDaemon(t, testOptions(t, redisURL, ns.URL, t.TempDir()))
	b := startDaemon(t, testOptions(t, redisURL, ns.URL, t.TempDir()))
	for _, d := range []*daemon{a, b} {
		testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
			if !d.cat.Synced() {
				return errors.New("catalogue not synced")
			}
			return nil
		})
	}

	key := fmt.Sprintf("e2e_%d", time.Now().UnixNano())
	t0 := time.Now()
	a.mustCall(t, "PUT", "/v1/limits/e2e", `{"rate":0.5,"capacity":5}`, true, 204)
	a.mustCall(t, "PUT", "/v1/keys/"+key, `{"plan":"e2e"}`, true, 204)
	var seen time.Duration
	testserver.WaitFor(t, 3*time.Second, 2*time.Millisecond, func() error {
		r := b.call(t, "GET", "/v1/keys/"+key, "", true)
		if r.status != 200 || r.body["plan"] != "e2e" {
			return fmt.Errorf("b still answers %d %s", r.status, r.raw)
		}
		seen = time.Since(t0)
		return nil
	})
	if seen >= time.Second {
		t.Fatalf("plan change took %v to reach the second process", seen)
	}
	t.Logf("plan change reached the second process in %v", seen)

	// Spend the bucket on b, then a sees it exhausted (one Redis bucket).
	for i := range 5 {
		r := b.mustCall(t, "POST", "/v1/allow", `{"key":"`+key+`","cost":1}`, false, 200)
		if r.body["allowed"] != true || r.body["degraded"] != false {
			t.Fatalf("check %d rejected or degraded: %s", i, r.raw)
		}
		if r.header.Get("X-RateLimit-Limit") != "5" || r.header.Get("RateLimit-Policy") != `"e2e";q=5;w=10` {
			t.Fatalf("check %d headers: %v", i, r.header)
		}
	}
	r := a.mustCall(t, "POST", "/v1/allow", `{"key":"`+key+`","cost":1}`, false, 200)
	if r.body["allowed"] != false || r.body["retry_after_ms"].(float64) <= 0 {
		t.Fatalf("sixth check on the other process: %s", r.raw)
	}
	for _, h := range []string{"Retry-After", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Stale", "RateLimit"} {
		if r.header.Get(h) == "" {
			t.Errorf("rejection lacks %s: %v", h, r.header)
		}
	}
	// Batch, in order.
	r = a.mustCall(t, "POST", "/v1/allow/batch", `{"checks":[{"key":"`+key+`"},{"key":""},{"key":"other_`+key+`","cost":2}]}`, false, 200)
	res, _ := r.body["results"].([]any)
	if len(res) != 3 || res[0].(map[string]any)["allowed"] != false || res[1].(map[string]any)["field"] != "checks[1].key" ||
		res[2].(map[string]any)["allowed"] != true {
		t.Fatalf("batch: %s", r.raw)
	}
	// Bad input over the wire.
	a.mustCall(t, "POST", "/v1/allow", `{"key":"`+key+`","cost":6}`, false, 400)
	// Deletion: not a plan still assigned; an assignment, after which the
	// other process sends the key to the default plan.
	a.mustCall(t, "DELETE", "/v1/limits/e2e", "", true, 409)
	a.mustCall(t, "DELETE", "/v1/keys/"+key, "", true, 204)
	testserver.WaitFor(t, 3*time.Second, 2*time.Millisecond, func() error {
		if r := b.call(t, "GET", "/v1/keys/"+key, "", true); r.body["plan"] != "default" {
			return fmt.Errorf("b still answers %s", r.raw)
		}
		return nil
	})
	a.mustCall(t, "DELETE", "/v1/limits/e2e", "", true, 204)
	a.mustCall(t, "PUT", "/v1/limits/e2e", `{"rate":1,"capacity":1}`, false, 401)

	m := a.call(t, "GET", "/metrics", "", false)
	for _, name := range []string{"quota_decisions_total", "quota_store_call_duration_seconds", "quota_config_version",
		"quota_tracked_keys", "quota_breaker_state", `quota_http_requests_total{code="200",route="POST /v1/allow"}`} {
		if !strings.Contains(m.raw, name) {
			t.Errorf("metrics lack %s", name)
		}
	}
	// Checks on the default plan come from growing leases: b decides on
	// both paths, and both are timed.
	for range 10 {
		b.mustCall(t, "POST", "/v1/allow", `{"key":"fast_`+key+`"}`, false, 200)
	}
	bm := b.call(t, "GET", "/metrics", "", false)
	for _, path := range []string{"fast", "slow"} {
		series := `quota_check_duration_seconds_count{path="` + path + `"}`
		if !strings.Contains(bm.raw, series) || strings.Contains(bm.raw, series+" 0\n") {
			t.Errorf("metrics lack checks on the %s path: %s", path, series)
		}
	}
	a.mustCall(t, "GET", "/healthz", "", false, 200)
	a.mustCall(t, "GET", "/readyz", "", false, 200)
}

// The catalogue survives a restart, a NATS outage, and a restart during
// the outage (from the cache file in --data-dir).
func TestRestartAndOutage(t *testing.T) {
	ns := testserver.StartNATS(t)
	dir := t.TempDir()
	o := testOptions(t, "", ns.URL, dir)
	d := startDaemon(t, o)
	d.mustCall(t, "PUT", "/v1/limits/gold", `{"rate":2,"capacity":3}`, true, 204)
	d.mustCall(t, "PUT", "/v1/keys/acct_g", `{"plan":"gold"}`, true, 204)
	d.stop(t)

	d = startDaemon(t, o)
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if !d.cat.Synced() {
			return errors.New("not synced")
		}
		return nil
	})
	if r := d.mustCall(t, "GET", "/v1/keys/acct_g", "", true, 200); r.body["plan"] != "gold" {
		t.Fatalf("after restart: %s", r.raw)
	}

	ns.Stop()
	if r := d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_g","cost":3}`, false, 200); r.body["limit"] != 3.0 {
		t.Fatalf("during the outage: %s", r.raw)
	}
	d.mustCall(t, "PUT", "/v1/limits/gold", `{"rate":9,"capacity":9}`, true, 503)
	d.stop(t)

	d = startDaemon(t, o)
	if r := d.mustCall(t, "GET", "/v1/limits/gold", "", true, 200); r.body["capacity"] != 3.0 {
		t.Fatalf("restart during the outage: %s", r.raw)
	}
	d.mustCall(t, "GET", "/readyz", "", false, 200)
	if r := d.mustCall(t, "GET", "/v1/keys/acct_g", "", true, 200); r.body["plan"] != "gold" {
		t.Fatalf("restart during the outage: %s", r.raw)
	}
	if m := d.call(t, "GET", "/metrics", "", false); !strings.Contains(m.raw, "quota_config_synced 0") {
		t.Errorf("metrics should show an unsynced catalogue")
	}

	ns.Restart(t)
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !d.cat.Synced() {
			return errors.New("not synced after NATS came back")
		}
		return nil
	})
	d.mustCall(t, "PUT", "/v1/limits/gold", `{"rate":9,"capacity":9}`, true, 204)
}

// Defaults need no flags: the embedded store and NATS, and a built-in
// default plan.
func TestEmbeddedDefaults(t *testing.T) {
	d := startDaemon(t, testOptions(t, "", "", t.TempDir()))
	r := d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_1"}`, false, 200)
	if r.body["limit"] != 200.0 || r.header.Get("RateLimit-Policy") != `"default";q=200;w=2` {
		t.Fatalf("built-in default: %s %v", r.raw, r.header)
	}
	d.mustCall(t, "PUT", "/v1/costs/search", `{"cost":5}`, true, 204)
	// A key of its own, whose bucket starts full: what the real clock
	// refills between two checks cannot show (a full bucket refills
	// nothing), so the remaining says the weight alone (1 would leave 199).
	if r := d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_2","endpoint":"search"}`, false, 200); r.body["remaining"] != 195.0 {
		t.Fatalf("endpoint weight: %s", r.raw)
	}
	if r := d.mustCall(t, "GET", "/v1/costs/search?history=1", "", true, 200); !bytes.Contains([]byte(r.raw), []byte(`"actor":"admin"`)) {
		t.Fatalf("history: %s", r.raw)
	}
}

// With --redis and no --default-rate/--default-capacity there is no
// built-in default plan: a batch of 1000 keys nobody assigned answers 404
// for each, and leaves no state in the limiter, the usage sinks or the
// ledger reporter.
func TestNoDefaultPlanWithRedis(t *testing.T) {
	rs := testserver.StartRedis(t)
	setQuotaEnv(t, nil)
	o, err := parseOptions([]string{"--redis", "redis://" + rs.Addr + "/0", "--listen", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--admin-token", adminToken, "--shutdown-delay", "0s", "--log-level", "warn"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{spent: map[string]int64{}}
	var (
		lim *region.Limiter
		rep *ledger.Reporter
	)
	d := startDaemon(t, o,
		fx.Supply(fx.Annotate(sink, fx.As(new(region.UsageSink)), fx.ResultTags(`group:"usage"`))),
		fx.Populate(&lim),
		fx.Invoke(func(in struct {
			fx.In
			Usage []region.UsageSink `group:"usage"`
		}) {
			for _, s := range in.Usage {
				if r, ok := s.(*ledger.Reporter); ok {
					rep = r
				}
			}
		}))
	if rep == nil {
		t.Fatal("the daemon has no ledger reporter")
	}
	openWindows := func() string {
		t.Helper()
		lim.Flush()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rep.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		m := d.call(t, "GET", "/metrics", "", false)
		for _, line := range strings.Split(m.raw, "\n") {
			if v, ok := strings.CutPrefix(line, "quota_ledger_open_windows "); ok {
				return v
			}
		}
		t.Fatal("no quota_ledger_open_windows in /metrics")
		return ""
	}

	// One key with a plan: the reporter and the limiter hold its state.
	d.mustCall(t, "PUT", "/v1/limits/known", `{"rate":10,"capacity":10}`, true, 204)
	d.mustCall(t, "PUT", "/v1/keys/acct_known", `{"plan":"known"}`, true, 204)
	if r := d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_known"}`, false, 200); r.body["allowed"] != true {
		t.Fatalf("assigned key: %s", r.raw)
	}
	before := openWindows()
	if before == "0" {
		t.Fatal("the reporter holds no window for the assigned key: the test proves nothing")
	}

	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"key":"new_%d"}`, i)
	}
	sb.WriteString(`]}`)
	r := d.mustCall(t, "POST", "/v1/allow/batch", sb.String(), false, 200)
	res, _ := r.body["results"].([]any)
	if len(res) != 1000 {
		t.Fatalf("%d results", len(res))
	}
	for i, x := range res {
		e, _ := x.(map[string]any)
		if e["status"] != 404.0 || e["field"] != fmt.Sprintf("checks[%d].key", i) {
			t.Fatalf("result %d: %v, want a 404 naming its key", i, x)
		}
	}
	d.mustCall(t, "POST", "/v1/allow", `{"key":"new_single"}`, false, 404)

	if after := openWindows(); after != before {
		t.Errorf("reporter windows %s, before the batch %s", after, before)
	}
	if n := lim.Stats().TrackedKeys; n != 1 {
		t.Errorf("the limiter tracks %d keys, want 1 (acct_known)", n)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for k := range sink.spent {
		if k != "acct_known" {
			t.Errorf("usage recorded for %q", k)
		}
	}
}

// recordingSink is a region.UsageSink that keeps what it is given.
type recordingSink struct {
	mu    sync.Mutex
	spent map[string]int64
}

func (s *recordingSink) Record(batch []region.Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range batch {
		s.spent[u.Key] += u.Spent
	}
}

// An optional usage sink is wired into the limiter, and a graceful stop
// hands it every decision's usage.
func TestShutdownFlushesUsage(t *testing.T) {
	sinks := []*recordingSink{{spent: map[string]int64{}}, {spent: map[string]int64{}}}
	d := startDaemon(t, testOptions(t, "", "", t.TempDir()),
		fx.Supply(
			fx.Annotate(sinks[0], fx.As(new(region.UsageSink)), fx.ResultTags(`group:"usage"`)),
			fx.Annotate(sinks[1], fx.As(new(region.UsageSink)), fx.ResultTags(`group:"usage"`)),
		))
	for range 7 {
		d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_flush","cost":2}`, false, 200)
	}
	d.stop(t)
	for i, s := range sinks {
		s.mu.Lock()
		got := s.spent["acct_flush"]
		s.mu.Unlock()
		if got != 14 {
			t.Fatalf("sink %d: usage handed over at stop: spent %d, want 14", i, got)
		}
	}
}

// --redis-cluster takes seed URLs and leases from a Redis Cluster.
func TestRedisCluster(t *testing.T) {
	rs := testserver.StartRedisWith(t, testserver.RedisOptions{Cluster: true})
	o := testOptions(t, "redis://"+rs.Addr, "", t.TempDir())
	o.RedisCluster = true
	d := startDaemon(t, o)
	for i := range 3 {
		r := d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_cluster","cost":1}`, false, 200)
		if r.body["allowed"] != true || r.body["degraded"] != false {
			t.Fatalf("check %d: %s", i, r.raw)
		}
	}
	if m := d.call(t, "GET", "/metrics", "", false); !strings.Contains(m.raw, `quota_store_calls_total{result="error"} 0`) {
		t.Errorf("store errors against the cluster")
	}
}

// Only the control plane writes the catalogue: a limiter started with
// --nats and without --control-plane answers writes with 403, saying where
// they go, still reads, and serves the plan the control plane wrote.
func TestOnlyTheControlPlaneWrites(t *testing.T) {
	ns := testserver.StartNATS(t)
	cp := startDaemon(t, testOptions(t, "", ns.URL, t.TempDir()))
	o := testOptions(t, "", ns.URL, t.TempDir())
	o.ControlPlane = false
	lim := startDaemon(t, o)

	cp.mustCall(t, "PUT", "/v1/limits/cp", `{"rate":1,"capacity":3}`, true, 204)
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/v1/limits/cp", `{"rate":1000,"capacity":1000}`},
		{"DELETE", "/v1/limits/cp", ""},
		{"PUT", "/v1/keys/acct_1", `{"plan":"cp"}`},
		{"PUT", "/v1/costs/search", `{"cost":0}`},
	} {
		r := lim.mustCall(t, w.method, w.path, w.body, true, 403)
		if msg, _ := r.body["error"].(string); !strings.Contains(msg, "--control-plane") {
			t.Errorf("%s %s: 403 without saying where writes go: %s", w.method, w.path, r.raw)
		}
	}
	// The token is checked first: no token is still 401.
	lim.mustCall(t, "PUT", "/v1/limits/cp", `{"rate":1,"capacity":1}`, false, 401)
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		r := lim.call(t, "GET", "/v1/limits/cp", "", true)
		if r.status != 200 || r.body["capacity"] != float64(3) {
			return fmt.Errorf("limiter reads %d %s", r.status, r.raw)
		}
		return nil
	})
}
