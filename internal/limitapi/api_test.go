package limitapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// memCatalog is an in-memory stand-in for catalog.Catalog.
type memCatalog struct {
	mu    sync.Mutex
	plans map[string]region.Plan
	keys  map[string]string
	costs map[string]int64
	rev   uint64
}

func newMemCatalog() *memCatalog {
	return &memCatalog{plans: map[string]region.Plan{}, keys: map[string]string{}, costs: map[string]int64{}}
}

func (m *memCatalog) Resolve(key string) (string, region.Plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, ok := m.keys[key]
	if !ok {
		name = "default"
	}
	p, ok := m.plans[name]
	if !ok {
		return "", region.Plan{}, fmt.Errorf("%w: key %q has no plan", region.ErrUnknownPlan, key)
	}
	p.Name = name // as catalog.Catalog names the plans it resolves
	return name, p, nil
}
func (m *memCatalog) Plan(key string) (region.Plan, error) {
	_, p, err := m.Resolve(key)
	return p, err
}
func (m *memCatalog) Cost(ep string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.costs[ep]
	return c, ok
}
func (m *memCatalog) PlanEntry(name string) (catalog.Entry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.plans[name]
	e := catalog.Entry{Kind: catalog.KindPlan, Name: name, Rate: p.Rate, Capacity: p.Capacity,
		FailurePolicy: p.FailurePolicy, Mode: p.Mode, Shadow: p.Shadow, Concurrency: p.Concurrency,
		TimeZone: p.TimeZone, AnchorDay: p.AnchorDay}
	if p.HasQuotas() {
		e.Quotas = p.QuotaList()
	}
	return e, ok
}
func (m *memCatalog) Assignment(key string) (catalog.Entry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.keys[key]
	return catalog.Entry{Kind: catalog.KindKey, Name: key, Plan: p}, ok
}
func (m *memCatalog) CostEntry(ep string) (catalog.Entry, bool) {
	c, ok := m.Cost(ep)
	return catalog.Entry{Kind: catalog.KindCost, Name: ep, Cost: c}, ok
}
func (m *memCatalog) PutPlan(_ context.Context, _, name string, p region.Plan) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.plans[name] = p
	m.rev++
	return m.rev, nil
}
func (m *memCatalog) Assign(_ context.Context, _, key, plan string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.plans[plan]; !ok {
		return 0, fmt.Errorf("%w: plan %q does not exist", region.ErrUnknownPlan, plan)
	}
	m.keys[key] = plan
	m.rev++
	return m.rev, nil
}
func (m *memCatalog) PutCost(_ context.Context, _, ep string, c int64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.costs[ep] = c
	m.rev++
	return m.rev, nil
}
func (m *memCatalog) Delete(_ context.Context, _ string, kind catalog.Kind, name string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ok bool
	switch kind {
	case catalog.KindPlan:
		_, ok = m.plans[name]
		delete(m.plans, name)
	case catalog.KindKey:
		_, ok = m.keys[name]
		delete(m.keys, name)
	case catalog.KindCost:
		_, ok = m.costs[name]
		delete(m.costs, name)
	}
	if !ok {
		return 0, fmt.Errorf("%w: %s %q does not exist", catalog.ErrNotFound, kind, name)
	}
	m.rev++
	return m.rev, nil
}
func (m *memCatalog) History(context.Context, catalog.Kind, string) ([]catalog.Entry, error) {
	return nil, catalog.ErrNotFound
}

// Tokens of the tests' APIs: the admin token; newAPIWithConfig may add
// check and read tokens.
const (
	token     = "s3cret"
	checkOld  = "check-old-0123456789"
	checkNew  = "check-new-0123456789"
	readToken = "read-0123456789abcdef"
)

// newAPI is an API with an admin token and no check or read token.
func newAPI(t testing.TB, withDefault bool) (http.Handler, *memCatalog) {
	t.Helper()
	return newAPIWith(t, withDefault, nil)
}

// newAPIWith is newAPI with the limiter wrapped by wrap (when not nil).
func newAPIWith(t testing.TB, withDefault bool, wrap func(limitapi.Limiter) limitapi.Limiter) (http.Handler, *memCatalog) {
	t.Helper()
	h, cat, _ := newAPIWithConfig(t, withDefault, wrap, nil)
	return h, cat
}

// newAPIWithConfig is newAPIWith with the config edited by edit (when not
// nil), and the *API.
func newAPIWithConfig(t testing.TB, withDefault bool, wrap func(limitapi.Limiter) limitapi.Limiter,
	edit func(*limitapi.Config)) (http.Handler, *memCatalog, *limitapi.API) {
	t.Helper()
	cat := newMemCatalog()
	if withDefault {
		cat.plans["default"] = region.Plan{Rate: 1, Capacity: 3}
	}
	cat.plans["pro"] = region.Plan{Rate: 1000, Capacity: 1000}
	cat.costs["search"] = 2
	cfg := region.DefaultConfig()
	cfg.Costs = cat
	lim, err := region.New(memstore.New(nil), cat, cfg)
	if err != nil {
		t.Fatal(err)
	}
	acfg := limitapi.DefaultConfig()
	acfg.Limiter, acfg.Catalog, acfg.AdminToken = lim, cat, token
	if wrap != nil {
		acfg.Limiter = wrap(lim)
	}
	if edit != nil {
		edit(&acfg)
	}
	api, err := limitapi.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	return api, cat, api
}

func do(h http.Handler, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestAllowAndHeaders(t *testing.T) {
	h, _ := newAPI(t, true)
	var last *httptest.ResponseRecorder
	for i := range 4 {
		last = do(h, "POST", "/v1/allow", `{"key":"acct_1","cost":1}`)
		if last.Code != 200 {
			t.Fatalf("check %d: %d %s", i, last.Code, last.Body)
		}
		var d map[string]any
		if err := json.Unmarshal(last.Body.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		want := i < 3
		if d["allowed"] != want {
			t.Fatalf("check %d: allowed = %v, want %v (%s)", i, d["allowed"], want, last.Body)
		}
		for _, f := range []string{"remaining", "limit", "retry_after_ms", "reset_ms", "stale_ms", "degraded"} {
			if _, ok := d[f]; !ok {
				t.Errorf("answer lacks %q", f)
			}
		}
		if d["limit"] != 3.0 {
			t.Errorf("limit = %v", d["limit"])
		}
	}
	hd := last.Header()
	want := map[string]string{
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": "0",
		"Retry-After":           "1",
		"RateLimit-Policy":      `"default";q=3;w=3`,
	}
	for k, v := range want {
		if got := hd.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"X-RateLimit-Reset", "X-RateLimit-Stale", "RateLimit"} {
		if hd.Get(k) == "" {
			t.Errorf("%s missing", k)
		}
	}
	if w := do(h, "POST", "/v1/allow", `{"key":"acct_2","endpoint":"search"}`); w.Code != 200 || !strings.Contains(w.Body.String(), `"remaining":1`) {
		t.Errorf("endpoint weight: %d %s", w.Code, w.Body)
	}
}

func TestBadInput(t *testing.T) {
	h, _ := newAPI(t, true)
	auth := []string{"Authorization", "Bearer " + token}
	tests := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		field                    string
	}{
		{"malformed", "POST", "/v1/allow", `{"key":`, nil, 400, "body"},
		{"not json", "POST", "/v1/allow", `hello`, nil, 400, "body"},
		{"empty body", "POST", "/v1/allow", ``, nil, 400, "body"},
		{"array", "POST", "/v1/allow", `[1]`, nil, 400, "body"},
		{"trailing", "POST", "/v1/allow", `{"key":"a"} {}`, nil, 400, "body"},
		{"cost type", "POST", "/v1/allow", `{"key":"a","cost":"3"}`, nil, 400, "cost"},
		{"cost float", "POST", "/v1/allow", `{"key":"a","cost":1.5}`, nil, 400, "cost"},
		{"key type", "POST", "/v1/allow", `{"key":7}`, nil, 400, "key"},
		{"unknown field", "POST", "/v1/allow", `{"key":"a","costs":1}`, nil, 400, "costs"},
		{"empty key", "POST", "/v1/allow", `{"key":""}`, nil, 400, "key"},
		{"long key", "POST", "/v1/allow", `{"key":"` + strings.Repeat("k", 513) + `"}`, nil, 400, "key"},
		{"space key", "POST", "/v1/allow", `{"key":"a b"}`, nil, 400, "key"},
		{"control key", "POST", "/v1/allow", `{"key":"a\u0001"}`, nil, 400, "key"},
		{"unicode key", "POST", "/v1/allow", `{"key":"ключ"}`, nil, 400, "key"},
		{"zero cost", "POST", "/v1/allow", `{"key":"a","cost":0}`, nil, 400, "cost"},
		{"negative cost", "POST", "/v1/allow", `{"key":"a","cost":-1}`, nil, 400, "cost"},
		{"cost above capacity", "POST", "/v1/allow", `{"key":"a","cost":4}`, nil, 400, "cost"},
		{"cost and endpoint", "POST", "/v1/allow", `{"key":"a","cost":1,"endpoint":"x"}`, nil, 400, "endpoint"},
		{"oversized body", "POST", "/v1/allow", `{"key":"` + strings.Repeat("k", 5000) + `"}`, nil, 413, "body"},
		{"empty batch", "POST", "/v1/allow/batch", `{"checks":[]}`, nil, 400, "checks"},
		{"batch type", "POST", "/v1/allow/batch", `{"checks":[{"key":"a","cost":true}]}`, nil, 400, "checks.cost"},
		{"no token", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1}`, nil, 401, "Authorization"},
		{"wrong token", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1}`, []string{"Authorization", "Bearer nope"}, 403, "Authorization"},
		{"basic auth", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1}`, []string{"Authorization", "Basic " + token}, 401, "Authorization"},
		{"rate missing", "PUT", "/v1/limits/pro", `{"capacity":1}`, auth, 400, "rate"},
		{"rate zero", "PUT", "/v1/limits/pro", `{"rate":0,"capacity":1}`, auth, 400, "rate"},
		{"rate below the minimum", "PUT", "/v1/limits/pro", `{"rate":1e-7,"capacity":1}`, auth, 400, "rate"},
		{"rate above the maximum", "PUT", "/v1/limits/pro", `{"rate":2e12,"capacity":1}`, auth, 400, "rate"},
		{"capacity above the maximum", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":2e12}`, auth, 400, "capacity"},
		{"capacity small", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":0.5}`, auth, 400, "capacity"},
		{"capacity huge", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1e300}`, auth, 400, "capacity"},
		{"rate type", "PUT", "/v1/limits/pro", `{"rate":"fast","capacity":1}`, auth, 400, "rate"},
		{"unknown failure policy", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"failure_policy":"maybe"}`, auth, 400, "failure_policy"},
		{"failure policy type", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"failure_policy":1}`, auth, 400, "failure_policy"},
		{"unknown mode", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"mode":"approx"}`, auth, 400, "mode"},
		{"exact failing open", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"mode":"exact","failure_policy":"open"}`, auth, 400, "failure_policy"},
		{"shadow type", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"shadow":"yes"}`, auth, 400, "shadow"},
		{"negative concurrency", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"concurrency":-1}`, auth, 400, "concurrency"},
		{"fractional concurrency", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"concurrency":1.5}`, auth, 400, "concurrency"},
		{"quota period unknown", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"quotas":[{"period":"year","limit":5}]}`, auth, 400, "quotas[0].period"},
		{"quota period missing", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"quotas":[{"limit":5}]}`, auth, 400, "quotas[0].period"},
		{"quota period twice", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"quotas":[{"period":"day","limit":5},{"period":"day","limit":6}]}`, auth, 400, "quotas[1].period"},
		{"quota limit zero", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"quotas":[{"period":"month","limit":0}]}`, auth, 400, "quotas[0].limit"},
		{"quota limit missing", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"quotas":[{"period":"month"}]}`, auth, 400, "quotas[0].limit"},
		{"quota limit fractional", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"quotas":[{"period":"month","limit":1.5}]}`, auth, 400, "quotas.limit"},
		{"too many quotas", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"quotas":[{"period":"hour","limit":1},{"period":"day","limit":1},{"period":"week","limit":1},{"period":"month","limit":1},{"period":"month","limit":2}]}`, auth, 400, "quotas"},
		{"quotas on an exact plan", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"mode":"exact","quotas":[{"period":"month","limit":5}]}`, auth, 400, "quotas"},
		{"unknown time zone", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"time_zone":"Mars/Olympus"}`, auth, 400, "time_zone"},
		{"anchor day 32", "PUT", "/v1/limits/pro", `{"rate":1,"capacity":1,"anchor_day":32}`, auth, 400, "anchor_day"},
		{"unknown plan", "PUT", "/v1/keys/acct_1", `{"plan":"gold"}`, auth, 400, "plan"},
		{"plan missing", "PUT", "/v1/keys/acct_1", `{}`, auth, 400, "plan"},
		{"bad key path", "PUT", "/v1/keys/a%20b", `{"plan":"pro"}`, auth, 400, "key"},
		{"cost zero", "PUT", "/v1/costs/search", `{"cost":0}`, auth, 400, "cost"},
		{"missing plan", "GET", "/v1/limits/gold", ``, auth, 404, "plan"},
		{"read without token", "GET", "/v1/limits/pro", ``, nil, 401, "Authorization"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(h, tt.method, tt.path, tt.body, tt.hdr...)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			var e struct{ Error, Field string }
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("body %q is not a JSON error: %v", w.Body, err)
			}
			if e.Field != tt.field {
				t.Fatalf("field %q, want %q (%s)", e.Field, tt.field, e.Error)
			}
		})
	}
}

func TestBatch(t *testing.T) {
	h, _ := newAPI(t, true)
	w := do(h, "POST", "/v1/allow/batch", `{"checks":[{"key":"a","cost":3},{"key":"a"},{"key":""},{"key":"b","endpoint":"search"}]}`)
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	var ans struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	if len(ans.Results) != 4 {
		t.Fatalf("%d results", len(ans.Results))
	}
	if ans.Results[0]["allowed"] != true || ans.Results[1]["allowed"] != false ||
		ans.Results[2]["field"] != "checks[2].key" || ans.Results[3]["remaining"] != 1.0 {
		t.Fatalf("results = %v", ans.Results)
	}
}

func TestControlPlane(t *testing.T) {
	h, _ := newAPI(t, false)
	auth := []string{"Authorization", "Bearer " + token}
	if w := do(h, "GET", "/v1/keys/acct_1", "", auth...); w.Code != 404 || !strings.Contains(w.Body.String(), "no plan") {
		t.Fatalf("no default: %d %s", w.Code, w.Body)
	}
	if w := do(h, "POST", "/v1/allow", `{"key":"acct_1"}`); w.Code != 404 {
		t.Fatalf("allow without plan: %d %s", w.Code, w.Body)
	}
	steps := []struct{ method, path, body string }{
		{"PUT", "/v1/limits/gold", `{"rate":10,"capacity":20}`},
		{"PUT", "/v1/keys/acct%2F1", `{"plan":"gold"}`},
		{"PUT", "/v1/costs/search", `{"cost":4}`},
	}
	for _, s := range steps {
		if w := do(h, s.method, s.path, s.body, auth...); w.Code != 204 {
			t.Fatalf("%s %s: %d %s", s.method, s.path, w.Code, w.Body)
		}
	}
	w := do(h, "GET", "/v1/limits/gold", "", auth...)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"rate":10,"capacity":20`) {
		t.Fatalf("GET plan: %d %s", w.Code, w.Body)
	}
	if w := do(h, "POST", "/v1/allow", `{"key":"acct/1","endpoint":"search"}`); w.Code != 200 {
		t.Fatalf("allow: %d %s", w.Code, w.Body)
	}
	w = do(h, "GET", "/v1/keys/acct%2F1", "", auth...)
	var k map[string]any
	json.Unmarshal(w.Body.Bytes(), &k)
	if w.Code != 200 || k["plan"] != "gold" || k["rate"] != 10.0 || k["capacity"] != 20.0 || k["remaining"] != 16.0 || k["stale_ms"] == nil {
		t.Fatalf("GET key: %d %s", w.Code, w.Body)
	}
	if w := do(h, "GET", "/v1/costs/search", "", auth...); !strings.Contains(w.Body.String(), `"cost":4`) {
		t.Fatalf("GET cost: %s", w.Body)
	}
	if w := do(h, "GET", "/v1/costs/other", "", auth...); !strings.Contains(w.Body.String(), `"cost":1,"default":true`) {
		t.Fatalf("GET default cost: %s", w.Body)
	}

	// Deletions (the catalogue's own rules, such as refusing a plan still
	// assigned, are tested against NATS in package catalog).
	deletes := []struct {
		name, path string
		header     []string
		code       int
		says       string
	}{
		{"without the token", "/v1/keys/acct%2F1", nil, 401, "Authorization"},
		{"a key's assignment", "/v1/keys/acct%2F1", auth, 204, ""},
		{"the same again", "/v1/keys/acct%2F1", auth, 404, `key \"acct/1\" does not exist`},
		{"a plan", "/v1/limits/gold", auth, 204, ""},
		{"an endpoint's weight", "/v1/costs/search", auth, 204, ""},
		{"a bad name", "/v1/costs/a%20b", auth, 400, `"field":"endpoint"`},
	}
	for _, d := range deletes {
		w := do(h, "DELETE", d.path, "", d.header...)
		if w.Code != d.code || !strings.Contains(w.Body.String(), d.says) {
			t.Fatalf("DELETE %s (%s): %d %s, want %d saying %s", d.path, d.name, w.Code, w.Body, d.code, d.says)
		}
	}
	// What follows: the key has no plan again (no default here), the plan is
	// gone, the endpoint costs the default.
	if w := do(h, "POST", "/v1/allow", `{"key":"acct/1"}`); w.Code != 404 {
		t.Fatalf("allow after the assignment was deleted: %d %s", w.Code, w.Body)
	}
	if w := do(h, "GET", "/v1/limits/gold", "", auth...); w.Code != 404 {
		t.Fatalf("GET deleted plan: %d %s", w.Code, w.Body)
	}
	if w := do(h, "GET", "/v1/costs/search", "", auth...); !strings.Contains(w.Body.String(), `"cost":1,"default":true`) {
		t.Fatalf("GET deleted cost: %s", w.Body)
	}
}

// FuzzHTTP sends arbitrary bodies and Authorization headers to every
// route: nothing may panic; every answer is 2xx or a 4xx JSON error naming
// a field; a protected route refuses (401 or 403) a header that holds none
// of its tokens, and never refuses "Bearer <one of its tokens>".
func FuzzHTTP(f *testing.F) {
	auths := []string{"", "Bearer " + token, "Bearer " + checkOld, "Bearer " + checkNew, "Bearer " + readToken,
		"bearer  " + readToken + " ", "Bearer", "Bearer x", "Basic " + token, "Bearer " + token + token}
	for i, s := range []string{`{"key":"a","cost":1}`, `{"key":"a","endpoint":"search"}`, `{"checks":[{"key":"a"}]}`,
		`{"rate":1,"capacity":2}`, `{"plan":"pro"}`, `{"cost":3}`, `{"key":"\u0000"}`, `{"cost":1e400}`, `[`, `null`} {
		for route := range 15 {
			f.Add(uint8(route), s, "acct_1", auths[(i+route)%len(auths)])
		}
	}
	h, _, _ := newAPIWithConfig(f, true, nil, func(c *limitapi.Config) {
		c.CheckTokens = []string{checkOld, checkNew}
		c.ReadTokens = []string{readToken}
	})
	routes := []struct {
		method, path, query string
		tokens              []string // nil: open
	}{
		{"POST", "/v1/allow", "", []string{checkOld, checkNew}},
		{"POST", "/v1/allow/batch", "", []string{checkOld, checkNew}},
		{"PUT", "/v1/limits/", "", []string{token}},
		{"PUT", "/v1/keys/", "", []string{token}},
		{"PUT", "/v1/costs/", "", []string{token}},
		{"GET", "/v1/keys/", "", []string{token, readToken}},
		{"GET", "/v1/limits/", "", []string{token, readToken}},
		{"GET", "/v1/costs/", "", []string{token, readToken}},
		{"GET", "/v1/keys/", "?history=1", []string{token, readToken}},
		{"GET", "/v1/limits/", "?history=1", []string{token, readToken}},
		{"GET", "/v1/costs/", "?history=true", []string{token, readToken}},
		{"DELETE", "/v1/keys/", "", []string{token}},
		{"DELETE", "/v1/limits/", "", []string{token}},
		{"DELETE", "/v1/costs/", "", []string{token}},
		{"POST", "/v1/limits/", "", nil}, // no such route
	}
	f.Fuzz(func(t *testing.T, route uint8, body, name, auth string) {
		rt := routes[int(route)%len(routes)]
		path := rt.path
		if strings.HasSuffix(path, "/") {
			path += urlEscape(name)
		}
		path += rt.query
		r := httptest.NewRequest(rt.method, "/", strings.NewReader(body))
		r.URL.Path, r.URL.RawPath = "", ""
		r.URL.Opaque = ""
		r.RequestURI = path
		r.URL, _ = r.URL.Parse(path)
		if r.URL == nil {
			return
		}
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
		muxAnswer := (w.Code == 404 || w.Code == 405) && !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json")
		refused := w.Code == 401 || w.Code == 403
		holdsToken, exact := false, false
		for _, tok := range rt.tokens {
			holdsToken = holdsToken || strings.Contains(auth, tok)
			exact = exact || auth == "Bearer "+tok
		}
		switch {
		case muxAnswer:
			return // the mux's own answer for an unmatched path
		case rt.tokens != nil && !holdsToken && !refused:
			t.Fatalf("%s %s with Authorization %q: %d, want 401 or 403", rt.method, path, auth, w.Code)
		case exact && refused:
			t.Fatalf("%s %s with Authorization %q: refused %d: %s", rt.method, path, auth, w.Code, w.Body)
		case w.Code == 401 && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer"):
			t.Fatalf("%s %s: 401 without WWW-Authenticate: Bearer", rt.method, path)
		case w.Code == 429 && w.Header().Get("Retry-After") == "":
			t.Fatalf("%s %s: 429 without Retry-After", rt.method, path)
		}
		switch {
		case w.Code < 300:
		case w.Code >= 400 && w.Code < 500:
			var e struct{ Error, Field string }
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" || e.Field == "" {
				t.Fatalf("%s %s %q: %d %q is not a JSON error naming a field", rt.method, path, body, w.Code, w.Body)
			}
		default:
			t.Fatalf("%s %s %q: status %d: %s", rt.method, path, body, w.Code, w.Body)
		}
	})
}

func urlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// slowLimiter stands for a limiter whose store answers in 50µs, and
// records how many decisions ran at once.
type slowLimiter struct {
	limitapi.Limiter
	inFlight, maxInFlight atomic.Int32
}

func (s *slowLimiter) Allow(ctx context.Context, key string, cost int64) (region.Decision, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(50 * time.Microsecond) // the store's latency, not synchronisation
	return s.Limiter.Allow(ctx, key, cost)
}

// A slow batch is spread over several goroutines, but the checks of one
// key keep their order; a fast one is not spread.
func TestBatchOrderPerKey(t *testing.T) {
	for _, slow := range []bool{false, true} {
		t.Run(fmt.Sprintf("slow=%v", slow), func(t *testing.T) { testBatchOrder(t, slow) })
	}
}

func testBatchOrder(t *testing.T, slow bool) {
	var sl *slowLimiter
	var wrap func(limitapi.Limiter) limitapi.Limiter
	if slow {
		wrap = func(l limitapi.Limiter) limitapi.Limiter { sl = &slowLimiter{Limiter: l}; return sl }
	}
	h, _ := newAPIWith(t, true, wrap) // default plan: capacity 3
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := range 200 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"key":"k%d"}`, i%20)
	}
	sb.WriteString(`]}`)
	w := do(h, "POST", "/v1/allow/batch", sb.String())
	var ans struct {
		Results []struct {
			Allowed   bool  `json:"allowed"`
			Remaining int64 `json:"remaining"`
		} `json:"results"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil || len(ans.Results) != 200 {
		t.Fatalf("%v: %d results", err, len(ans.Results))
	}
	for i, r := range ans.Results {
		nth := i / 20 // how many earlier checks of this key
		if want := nth < 3; r.Allowed != want {
			t.Fatalf("check %d (key k%d, #%d of it): allowed %v, want %v", i, i%20, nth, r.Allowed, want)
		}
		if nth < 3 && r.Remaining != int64(2-nth) {
			t.Fatalf("check %d: remaining %d, want %d", i, r.Remaining, 2-nth)
		}
	}
	if slow && sl.maxInFlight.Load() < 2 {
		t.Fatalf("a slow batch was not spread: at most %d decisions at once", sl.maxInFlight.Load())
	}
}
