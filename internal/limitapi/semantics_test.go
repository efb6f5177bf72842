package limitapi_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/redisstore"
)

// TestPlanSemanticsThroughTheAPI: a plan's failure policy, mode, shadow
// flag and concurrency are written with PUT /v1/limits/{plan}, read back
// with GET, and a shadow plan's would-be rejections are allowed and say so.
func TestPlanSemanticsThroughTheAPI(t *testing.T) {
	h, _ := newAPI(t, false)
	auth := []string{"Authorization", "Bearer " + token}
	if w := do(h, "PUT", "/v1/limits/default", `{"rate":1e-6,"capacity":1,"shadow":true,"failure_policy":"open","concurrency":2}`, auth...); w.Code != 204 {
		t.Fatalf("PUT: %d %s", w.Code, w.Body)
	}
	w := do(h, "GET", "/v1/limits/default", "", auth...)
	for _, want := range []string{`"failure_policy":"open"`, `"mode":"leased"`, `"shadow":true`, `"concurrency":2`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Fatalf("GET plan lacks %s: %s", want, w.Body)
		}
	}
	for i := range 3 {
		w := do(h, "POST", "/v1/allow", `{"key":"acct_1"}`)
		var d map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil || w.Code != 200 {
			t.Fatalf("check %d: %d %s", i, w.Code, w.Body)
		}
		shadow, has := d["shadow_rejected"]
		if d["allowed"] != true || has != (i > 0) || (has && shadow != true) {
			t.Fatalf("check %d of a shadow plan of capacity 1: %s", i, w.Body)
		}
	}
	if w := do(h, "PUT", "/v1/limits/exact", `{"rate":1,"capacity":5,"mode":"exact"}`, auth...); w.Code != 204 {
		t.Fatalf("PUT exact: %d %s", w.Code, w.Body)
	}
	if w := do(h, "GET", "/v1/limits/exact", "", auth...); !strings.Contains(w.Body.String(), `"failure_policy":"closed","mode":"exact"`) {
		t.Fatalf("GET exact plan: %s", w.Body)
	}
	if w := do(h, "GET", "/v1/keys/acct_1", "", auth...); !strings.Contains(w.Body.String(), `"failure_policy":"open","mode":"leased","shadow":true,"concurrency":2`) {
		t.Fatalf("GET key of the shadow plan: %s", w.Body)
	}
}

// TestDecisionSaysWhichPolicyApplied: with the store cut (a real Redis
// behind a toxiproxy proxy that is down), every answer says it was
// degraded and which failure policy decided it.
func TestDecisionSaysWhichPolicyApplied(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	cat := newMemCatalog()
	cat.plans["sms"] = region.Plan{Rate: 10, Capacity: 10, FailurePolicy: region.FailClosed}
	cat.plans["reads"] = region.Plan{Rate: 10, Capacity: 10, FailurePolicy: region.FailOpen}
	cat.plans["std"] = region.Plan{Rate: 10, Capacity: 10}
	cat.keys["closed"], cat.keys["open"], cat.keys["degraded"] = "sms", "reads", "std"
	cfg := region.DefaultConfig()
	cfg.StoreTimeout = 20 * time.Millisecond
	lim, err := region.New(redisstore.New(rdb, "api:"), cat, cfg)
	if err != nil {
		t.Fatal(err)
	}
	acfg := limitapi.DefaultConfig()
	acfg.Limiter, acfg.Catalog, acfg.AdminToken = lim, cat, token
	h, err := limitapi.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Down()
	for _, tc := range []struct{ key, want string }{
		{"closed", `"allowed":false,`},
		{"open", `"allowed":true,`},
		{"degraded", `"allowed":true,`},
	} {
		w := do(h, "POST", "/v1/allow", `{"key":"`+tc.key+`"}`)
		body := w.Body.String()
		if w.Code != 200 || !strings.Contains(body, tc.want) || !strings.Contains(body, `"degraded":true,"failure_policy":"`+tc.key+`"`) {
			t.Fatalf("%s plan, store down: %d %s", tc.key, w.Code, body)
		}
	}
}

// TestAcquireRelease: POST /v1/acquire takes a slot of the key's plan,
// renews it with its lease_id, refuses past the plan's concurrency, and
// POST /v1/release frees it; bad input names its field.
func TestAcquireRelease(t *testing.T) {
	h, cat := newAPI(t, false)
	cat.plans["llm"] = region.Plan{Rate: 1, Capacity: 1, Concurrency: 2}
	cat.keys["acct_1"] = "llm"
	acquire := func(body string) map[string]any {
		t.Helper()
		w := do(h, "POST", "/v1/acquire", body)
		var m map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil || w.Code != 200 {
			t.Fatalf("acquire %s: %d %s", body, w.Code, w.Body)
		}
		return m
	}
	first := acquire(`{"key":"acct_1"}`)
	id, _ := first["lease_id"].(string)
	if first["allowed"] != true || id == "" || first["expires_ms"] != 30000.0 || first["limit"] != 2.0 || first["held"] != 1.0 {
		t.Fatalf("first acquire: %v", first)
	}
	if m := acquire(`{"key":"acct_1","lease_id":"` + id + `"}`); m["allowed"] != true || m["lease_id"] != id || m["held"] != 1.0 {
		t.Fatalf("renewal: %v", m)
	}
	if m := acquire(`{"key":"acct_1"}`); m["allowed"] != true || m["held"] != 2.0 {
		t.Fatalf("second slot: %v", m)
	}
	w := do(h, "POST", "/v1/acquire", `{"key":"acct_1"}`)
	if !strings.Contains(w.Body.String(), `"allowed":false,"lease_id":"","expires_ms":0`) || w.Header().Get("Retry-After") == "" {
		t.Fatalf("third slot of 2: %s (Retry-After %q)", w.Body, w.Header().Get("Retry-After"))
	}
	if w := do(h, "POST", "/v1/release", `{"key":"acct_1","lease_id":"`+id+`"}`); w.Body.String() != "{\"released\":true}\n" {
		t.Fatalf("release: %d %s", w.Code, w.Body)
	}
	if w := do(h, "POST", "/v1/release", `{"key":"acct_1","lease_id":"`+id+`"}`); w.Body.String() != "{\"released\":false}\n" {
		t.Fatalf("second release: %d %s", w.Code, w.Body)
	}
	if m := acquire(`{"key":"acct_1"}`); m["allowed"] != true {
		t.Fatalf("acquire after a release: %v", m)
	}

	for _, tc := range []struct{ path, body, field string }{
		{"/v1/acquire", `{}`, "key"},
		{"/v1/acquire", `{"key":"a b"}`, "key"},
		{"/v1/acquire", `{"key":"acct_1","lease_id":""}`, "lease_id"},
		{"/v1/acquire", `{"key":"acct_1","lease_id":"has space"}`, "lease_id"},
		{"/v1/acquire", `{"key":"acct_1","lease_id":"` + strings.Repeat("x", 65) + `"}`, "lease_id"},
		{"/v1/acquire", `{"key":"acct_1","lease_id":7}`, "lease_id"},
		{"/v1/acquire", `{"key":"acct_1","slots":2}`, "slots"},
		{"/v1/release", `{"key":"acct_1"}`, "lease_id"},
	} {
		w := do(h, "POST", tc.path, tc.body)
		var e struct{ Error, Field string }
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Code != 400 || e.Field != tc.field {
			t.Errorf("%s %s: %d %s, want 400 naming %s", tc.path, tc.body, w.Code, w.Body, tc.field)
		}
	}
	// A key whose plan has no concurrency limit.
	cat.plans["pro"] = region.Plan{Rate: 1, Capacity: 1}
	cat.keys["acct_2"] = "pro"
	if w := do(h, "POST", "/v1/acquire", `{"key":"acct_2"}`); w.Code != 400 || !strings.Contains(w.Body.String(), "no concurrency limit") {
		t.Errorf("acquire without a concurrency limit: %d %s", w.Code, w.Body)
	}
}

// TestAcquireNeedsCheckToken: with check tokens configured, the
// concurrency routes refuse a request without one, and serve one with.
func TestAcquireNeedsCheckToken(t *testing.T) {
	h, cat, _ := newAPIWithConfig(t, false, nil, func(c *limitapi.Config) { c.CheckTokens = []string{checkNew} })
	cat.plans["default"] = region.Plan{Rate: 1, Capacity: 1, Concurrency: 1}
	for _, path := range []string{"/v1/acquire", "/v1/release"} {
		body := `{"key":"acct_1","lease_id":"x"}`
		if w := do(h, "POST", path, body); w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s without a token: %d %s", path, w.Code, w.Body)
		}
		if w := do(h, "POST", path, body, "Authorization", "Bearer wrong-token-0123456789"); w.Code != 403 {
			t.Errorf("%s with a wrong token: %d %s", path, w.Code, w.Body)
		}
		if w := do(h, "POST", path, body, "Authorization", "Bearer "+checkNew); w.Code != 200 {
			t.Errorf("%s with the check token: %d %s", path, w.Code, w.Body)
		}
	}
}

// TestQuotasThroughTheAPI: a plan's quotas are written with PUT
// /v1/limits/{plan} and read back; a check answers the tightest
// constraint, every quota's remaining and its reset, and lists every
// policy in the IETF fields; once the day's quota is spent the check is
// refused for it, with retry_after_ms at the day's end.
func TestQuotasThroughTheAPI(t *testing.T) {
	h, _ := newAPI(t, false)
	auth := []string{"Authorization", "Bearer " + token}
	body := `{"rate":1000,"capacity":1000,"quotas":[{"period":"month","limit":100},{"period":"day","limit":5}],"time_zone":"Europe/Paris","anchor_day":15}`
	if w := do(h, "PUT", "/v1/limits/metered", body, auth...); w.Code != 204 {
		t.Fatalf("PUT: %d %s", w.Code, w.Body)
	}
	w := do(h, "GET", "/v1/limits/metered", "", auth...)
	if want := `"quotas":[{"period":"day","limit":5},{"period":"month","limit":100}],"time_zone":"Europe/Paris","anchor_day":15`; !strings.Contains(w.Body.String(), want) {
		t.Fatalf("GET plan: %s, want %s", w.Body, want)
	}
	if w := do(h, "PUT", "/v1/keys/acct_q", `{"plan":"metered"}`, auth...); w.Code != 204 {
		t.Fatalf("PUT key: %d %s", w.Code, w.Body)
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(paris)
	dayEnd := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, paris)
	type quota struct {
		Period    string
		Limit     int64
		Remaining int64
		ResetMS   int64 `json:"reset_ms"`
	}
	type answer struct {
		Allowed        bool
		Remaining      int64
		RetryAfterMS   int64   `json:"retry_after_ms"`
		Tightest       string  `json:"tightest"`
		QuotaRejected  bool    `json:"quota_rejected"`
		QuotaRemaining []quota `json:"quota_remaining"`
	}
	for i := range 7 {
		w := do(h, "POST", "/v1/allow", `{"key":"acct_q"}`)
		var a answer
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatalf("check %d: %v: %s", i, err, w.Body)
		}
		if len(a.QuotaRemaining) != 2 || a.QuotaRemaining[0].Period != "day" || a.QuotaRemaining[1].Period != "month" || a.Tightest != "day" {
			t.Fatalf("check %d: %s, want both quotas listed and the day tightest", i, w.Body)
		}
		if left := time.Until(dayEnd).Milliseconds(); abs(a.QuotaRemaining[0].ResetMS-left) > 2000 {
			t.Fatalf("check %d: day reset_ms %d, want about %d", i, a.QuotaRemaining[0].ResetMS, left)
		}
		if i < 5 {
			if w.Code != 200 || !a.Allowed || a.Remaining != int64(4-i) || a.QuotaRemaining[0].Remaining != int64(4-i) {
				t.Fatalf("check %d: %d %s, want allowed with %d left today", i, w.Code, w.Body, 4-i)
			}
			policy, state := w.Header().Get("Ratelimit-Policy"), w.Header().Get("Ratelimit")
			if !strings.Contains(policy, `"metered";q=1000`) || !strings.Contains(policy, `"metered-day";q=5;w=`) || !strings.Contains(policy, `"metered-month";q=100;w=`) ||
				!strings.Contains(state, `"metered-day";r=`+strconv.Itoa(4-i)) || !strings.Contains(state, `"metered-month";r=`) {
				t.Fatalf("check %d: RateLimit-Policy %q, RateLimit %q, want every policy", i, policy, state)
			}
			continue
		}
		if w.Code != 200 || a.Allowed || !a.QuotaRejected || a.Remaining != 0 {
			t.Fatalf("check %d: %d %s, want refused for the day's quota", i, w.Code, w.Body)
		}
		if left := time.Until(dayEnd).Milliseconds(); abs(a.RetryAfterMS-left) > 2000 {
			t.Fatalf("check %d: retry_after_ms %d, want the day's end in about %d", i, a.RetryAfterMS, left)
		}
	}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
