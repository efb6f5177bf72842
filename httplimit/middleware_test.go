package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

func TestMiddleware(t *testing.T) {
	plans := region.StaticPlans{Default: region.Plan{Rate: 1, Capacity: 4}}
	cfg := region.DefaultConfig()
	cfg.Costs = region.StaticCosts{"/search": 2}
	lim, err := region.New(memstore.New(nil), plans, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.Middleware(httplimit.Config{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	mux.Handle("GET /search", mw(ok))
	mux.Handle("GET /item", mw(ok))

	tests := []struct {
		name, path, key string
		status          int
		remaining       string
	}{
		{"no key", "/search", "", http.StatusUnauthorized, ""},
		{"weighted", "/search", "k1", http.StatusTeapot, "2"},
		{"weighted again", "/search", "k1", http.StatusTeapot, "0"},
		{"rejected", "/search", "k1", http.StatusTooManyRequests, "0"},
		{"default cost", "/item", "k2", http.StatusTeapot, "3"},
		{"bad key", "/item", "k\x01", http.StatusBadRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.path, nil)
			if tt.key != "" {
				r.Header.Set("X-API-Key", tt.key)
			}
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if got := w.Header().Get("X-RateLimit-Remaining"); got != tt.remaining {
				t.Errorf("remaining %q, want %q", got, tt.remaining)
			}
			if tt.remaining != "" && (w.Header().Get("RateLimit") == "" || w.Header().Get("RateLimit-Policy") == "" || w.Header().Get("X-RateLimit-Limit") != "4") {
				t.Errorf("headers missing: %v", w.Header())
			}
			if (w.Code == http.StatusTooManyRequests) != (w.Header().Get("Retry-After") != "") {
				t.Errorf("Retry-After %q on status %d", w.Header().Get("Retry-After"), w.Code)
			}
		})
	}
}

func TestWriteHeaders(t *testing.T) {
	h := http.Header{}
	httplimit.WriteHeaders(h, httplimit.Policy{Name: `we"ird`, Plan: region.Plan{Rate: 10, Capacity: 25}},
		region.Decision{Allowed: false, Remaining: 0, Limit: 25, RetryAfter: 1500e6, Reset: 2500e6, Stale: 800e6})
	want := map[string]string{
		"X-RateLimit-Limit": "25", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3",
		"X-RateLimit-Stale": "0.800", "Retry-After": "2",
		"RateLimit-Policy": `"we\"ird";q=25;w=3`, "RateLimit": `"we\"ird";r=0;t=3`,
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func BenchmarkWriteHeaders(b *testing.B) {
	h := http.Header{}
	p := httplimit.Policy{Name: "pro", Plan: region.Plan{Rate: 100, Capacity: 200}}
	d := region.Decision{Remaining: 17, Limit: 200, RetryAfter: 1e9, Reset: 2e9, Stale: 3e6}
	b.ReportAllocs()
	for b.Loop() {
		httplimit.WriteHeaders(h, p, d)
	}
}

// countingPlans names every key's plan "resolved" and counts the calls.
type countingPlans struct{ calls int }

func (c *countingPlans) Resolve(string) (string, region.Plan, error) {
	c.calls++
	return "resolved", region.Plan{Name: "resolved", Rate: 1, Capacity: 9}, nil
}

// planlessLimiter allows everything with decisions that carry no plan.
type planlessLimiter struct{}

func (planlessLimiter) Allow(context.Context, string, int64) (region.Decision, error) {
	return region.Decision{Allowed: true, Limit: 9, Remaining: 8}, nil
}
func (planlessLimiter) EndpointCost(string) (int64, error) { return 1, nil }

// The policy is the plan the decision carries; Plans is asked only when
// the decision carries none.
func TestMiddlewarePolicy(t *testing.T) {
	lim, err := region.New(memstore.New(nil),
		region.StaticPlans{Default: region.Plan{Name: "pro", Rate: 2, Capacity: 4}}, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		limiter   httplimit.Limiter
		plans     bool
		policy    string
		resolveds int
	}{
		{"decision carries its plan", lim, true, `"pro";q=4;w=2`, 0},
		{"decision carries its plan, no Plans", lim, false, `"pro";q=4;w=2`, 0},
		{"planless decision, Plans", planlessLimiter{}, true, `"resolved";q=9;w=9`, 1},
		{"planless decision, no Plans", planlessLimiter{}, false, `"default";q=9`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := &countingPlans{}
			cfg := httplimit.Config{Limiter: tt.limiter}
			if tt.plans {
				cfg.Plans = plans
			}
			mw, err := httplimit.Middleware(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/x", nil)
			r.Header.Set("X-API-Key", "acct_1")
			w := httptest.NewRecorder()
			mw(http.NotFoundHandler()).ServeHTTP(w, r)
			if got := w.Header().Get("RateLimit-Policy"); got != tt.policy {
				t.Errorf("RateLimit-Policy %q, want %q", got, tt.policy)
			}
			if plans.calls != tt.resolveds {
				t.Errorf("Plans.Resolve called %d times, want %d", plans.calls, tt.resolveds)
			}
		})
	}
}

func TestRedactKey(t *testing.T) {
	tests := []struct {
		name, err, key, want string
	}{
		{"quoted", `region: plan for key "sk_live_abc": boom`, "sk_live_abc", `region: plan for key "<key>": boom`},
		{"bare", `store: quota:{sk_live_abc}: timeout`, "sk_live_abc", `store: quota:{<key>}: timeout`},
		{"escaped quote", `key "a\"bcd" failed`, `a"bcd`, `key "<key>" failed`},
		{"short key only where quoted", `key "ab" failed at abacus`, "ab", `key "<key>" failed at abacus`},
		{"no key", `boom`, "", `boom`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httplimit.RedactKey(errors.New(tt.err), tt.key); got != tt.want {
				t.Errorf("RedactKey = %q, want %q", got, tt.want)
			}
		})
	}
}

// errorBodyJSON is the body encoding/json writes for an ErrorBody without
// HTML escaping, as WriteError wrote it before it wrote it by hand.
func errorBodyJSON(field, msg string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(httplimit.ErrorBody{Error: msg, Field: field})
	return b.String()
}

func checkWriteError(t *testing.T, field, msg string) {
	t.Helper()
	w := httptest.NewRecorder()
	httplimit.WriteError(w, http.StatusTeapot, field, msg)
	if want := errorBodyJSON(field, msg); w.Body.String() != want {
		t.Fatalf("WriteError(%q, %q) wrote %q, want %q", field, msg, w.Body.String(), want)
	}
	if w.Code != http.StatusTeapot || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("WriteError: status %d, header %v", w.Code, w.Header())
	}
}

// WriteError writes what encoding/json writes, escapes included.
func TestWriteError(t *testing.T) {
	for _, s := range []string{"", "rate limit exceeded", `a "quoted" \ back`, "<admin token> & co", "tab\tnl\nrc\rbs\bff\f\x00\x01\x1f\x7f",
		"ключ", "bad \xff\xfe utf-8 \xe2\x82", "line\u2028para\u2029", "emoji 😀", "\xed\xa0\x80"} {
		checkWriteError(t, "", s)
		checkWriteError(t, s, "msg")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		checkWriteError(t, "key", string(b))
	}
}

func FuzzWriteError(f *testing.F) {
	f.Add("key", "rate limit exceeded")
	f.Add("", "bad \xff \u2028 \x01 \"<>&\"")
	f.Fuzz(func(t *testing.T, field, msg string) { checkWriteError(t, field, msg) })
}
