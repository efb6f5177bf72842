package limitapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/region"
)

// withTokens configures check tokens (two, for rotation) and a read token.
func withTokens(c *limitapi.Config) {
	c.CheckTokens = []string{checkOld, checkNew}
	c.ReadTokens = []string{readToken}
}

// samplePath fills a route pattern's wildcards.
func samplePath(pattern string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	r := strings.NewReplacer("{plan}", "pro", "{key}", "acct_1", "{endpoint}", "search")
	return method, r.Replace(path)
}

// sampleBody is a valid body for the route.
func sampleBody(pattern string) string {
	switch {
	case strings.HasPrefix(pattern, "POST /v1/allow/batch"):
		return `{"checks":[{"key":"acct_1"}]}`
	case strings.HasPrefix(pattern, "POST /v1/allow"):
		return `{"key":"acct_1"}`
	case strings.HasPrefix(pattern, "POST /v1/refund"), strings.HasPrefix(pattern, "POST /v1/charge"):
		return `{"key":"acct_1","cost":1,"request_id":"r1"}`
	case strings.HasPrefix(pattern, "POST /v1/acquire"), strings.HasPrefix(pattern, "POST /v1/release"):
		return `{"key":"acct_1","lease_id":"x"}`
	case strings.HasPrefix(pattern, "PUT /v1/limits/"):
		return `{"rate":1000,"capacity":1000}`
	case strings.HasPrefix(pattern, "PUT /v1/keys/"):
		return `{"plan":"pro"}`
	case strings.HasPrefix(pattern, "PUT /v1/costs/"):
		return `{"cost":2}`
	}
	return ""
}

// Every route refuses the callers its Access does not name: no token 401
// (with WWW-Authenticate), a wrong one 403, a right one passes; with no
// check token the check API is open, and with no read or admin token reads
// are refused.
func TestRouteAccess(t *testing.T) {
	const wrong = "wrong-0123456789abcdef"
	tests := []struct {
		name  string
		edit  func(*limitapi.Config)
		allow map[limitapi.Access][]string // tokens that pass; "" = no header
	}{
		{"every token configured", withTokens, map[limitapi.Access][]string{
			limitapi.AccessCheck: {checkOld, checkNew},
			limitapi.AccessRead:  {readToken, token},
			limitapi.AccessAdmin: {token},
		}},
		{"no check token: checks open", func(c *limitapi.Config) { c.ReadTokens = []string{readToken} }, map[limitapi.Access][]string{
			limitapi.AccessCheck: {"", wrong, token},
			limitapi.AccessRead:  {readToken, token},
			limitapi.AccessAdmin: {token},
		}},
		{"no token at all", func(c *limitapi.Config) { c.AdminToken = "" }, map[limitapi.Access][]string{
			limitapi.AccessCheck: {""},
			limitapi.AccessRead:  nil,
			limitapi.AccessAdmin: nil,
		}},
	}
	candidates := []string{"", wrong, checkOld, checkNew, readToken, token}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _, api := newAPIWithConfig(t, true, nil, tt.edit)
			for _, rt := range append(api.Routes(), api.ConcurrencyRoutes()...) {
				if rt.Access == limitapi.AccessAnyone {
					t.Errorf("%s: the API has no open route", rt.Pattern)
				}
				for _, tok := range candidates {
					method, path := samplePath(rt.Pattern)
					var hdr []string
					if tok != "" {
						hdr = []string{"Authorization", "Bearer " + tok}
					}
					w := do(h, method, path, sampleBody(rt.Pattern), hdr...)
					passes := false
					for _, ok := range tt.allow[rt.Access] {
						passes = passes || ok == tok
					}
					open := len(tt.allow[rt.Access]) > 0 && tt.allow[rt.Access][0] == ""
					var want []int
					switch {
					case passes || open:
					case tok == "" && len(tt.allow[rt.Access]) > 0:
						want = []int{401}
					default:
						want = []int{403}
					}
					refused := w.Code == 401 || w.Code == 403
					if want == nil && refused || want != nil && w.Code != want[0] {
						t.Errorf("%s (%v) with token %q: %d %s, want %v (nil: not refused)", rt.Pattern, rt.Access, tok, w.Code, w.Body, want)
					}
					if w.Code == 401 && w.Header().Get("WWW-Authenticate") == "" {
						t.Errorf("%s: 401 without WWW-Authenticate", rt.Pattern)
					}
					if refused && !strings.Contains(w.Body.String(), `"field":"Authorization"`) {
						t.Errorf("%s: refusal %s does not name Authorization", rt.Pattern, w.Body)
					}
				}
			}
		})
	}
}

// ServeHTTP serves Routes and ConcurrencyRoutes and nothing else.
func TestServesRoutes(t *testing.T) {
	_, _, api := newAPIWithConfig(t, true, nil, withTokens)
	routes := append(api.Routes(), api.ConcurrencyRoutes()...)
	mux := api.Mux(routes)
	for _, rt := range routes {
		method, path := samplePath(rt.Pattern)
		if _, got := mux.Handler(httptest.NewRequest(method, path, nil)); got != rt.Pattern {
			t.Errorf("%s %s is served by %q, want %q", method, path, got, rt.Pattern)
		}
	}
}

// historyCatalog has a history for every entry.
type historyCatalog struct{ *memCatalog }

func (historyCatalog) History(context.Context, catalog.Kind, string) ([]catalog.Entry, error) {
	return []catalog.Entry{{Kind: catalog.KindPlan, Name: "pro", Actor: "admin"}}, nil
}

// ?history=1 reads are limited per caller: past the burst, 429 with
// Retry-After for that token only; other reads are not limited.
func TestHistoryRateLimit(t *testing.T) {
	h, _, _ := newAPIWithConfig(t, true, nil, func(c *limitapi.Config) {
		withTokens(c)
		c.Catalog = historyCatalog{c.Catalog.(*memCatalog)}
		c.HistoryRate, c.HistoryBurst = 0.01, 2 // one more every 100 s
	})
	read := []string{"Authorization", "Bearer " + readToken}
	admin := []string{"Authorization", "Bearer " + token}
	steps := []struct {
		name, path string
		hdr        []string
		status     int
	}{
		{"first", "/v1/limits/pro?history=1", read, 200},
		{"second, another kind", "/v1/keys/acct_1?history=1", read, 200},
		{"past the burst", "/v1/costs/search?history=1", read, 429},
		{"a plain read", "/v1/limits/pro", read, 200},
		{"another caller", "/v1/limits/pro?history=1", admin, 200},
		{"still past the burst", "/v1/limits/pro?history=true", read, 429},
	}
	for _, s := range steps {
		w := do(h, "GET", s.path, "", s.hdr...)
		if w.Code != s.status {
			t.Fatalf("%s: %d %s, want %d", s.name, w.Code, w.Body, s.status)
		}
		if s.status == 429 {
			if ra := w.Header().Get("Retry-After"); ra != "100" {
				t.Errorf("%s: Retry-After %q, want 100", s.name, ra)
			}
			if !strings.Contains(w.Body.String(), `"field":"history"`) {
				t.Errorf("%s: %s does not name the field", s.name, w.Body)
			}
		}
	}
}

func TestConfigTokens(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*limitapi.Config)
		field string // "" = valid
	}{
		{"none", func(*limitapi.Config) {}, ""},
		{"check and read", withTokens, ""},
		{"short check token", func(c *limitapi.Config) { c.CheckTokens = []string{"short"} }, "CheckTokens[0]"},
		{"duplicate read token", func(c *limitapi.Config) { c.ReadTokens = []string{readToken, readToken} }, "ReadTokens[1]"},
		{"no history rate", func(c *limitapi.Config) { c.HistoryRate = 0 }, "HistoryRate"},
		{"no history burst", func(c *limitapi.Config) { c.HistoryBurst = 0 }, "HistoryBurst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := limitapi.DefaultConfig()
			cfg.Limiter, cfg.Catalog = failingLimiter{}, newMemCatalog()
			tt.edit(&cfg)
			_, err := limitapi.New(cfg)
			if (err != nil) != (tt.field != "") || err != nil && !strings.Contains(err.Error(), "config "+tt.field+":") {
				t.Fatalf("err = %v, want one naming %q", err, tt.field)
			}
			if err != nil && strings.Contains(err.Error(), readToken) {
				t.Fatalf("the error quotes a token: %v", err)
			}
		})
	}
}

// failingLimiter fails every call with an error naming the key, as a store
// error might.
type failingLimiter struct{}

func (failingLimiter) Allow(_ context.Context, key string, _ int64) (region.Decision, error) {
	return region.Decision{}, fmt.Errorf("store call for %q: %w", key, errors.New("connection reset"))
}
func (failingLimiter) EndpointCost(string) (int64, error) { return 1, nil }
func (failingLimiter) Peek(string) (region.KeyState, error) {
	return region.KeyState{}, region.ErrNotTracked
}

// A failed decision is logged without its key above debug level.
func TestLogsWithoutKeys(t *testing.T) {
	const secretKey = "sk_live_0123456789"
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var logs bytes.Buffer
		cfg := limitapi.DefaultConfig()
		cfg.Limiter, cfg.Catalog = failingLimiter{}, newMemCatalog()
		cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: level}))
		api, err := limitapi.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{`{"key":"` + secretKey + `"}`, `{"checks":[{"key":"` + secretKey + `"}]}`} {
			path := "/v1/allow"
			if strings.Contains(body, "checks") {
				path += "/batch"
			}
			w := do(api, "POST", path, body)
			if w.Code != 500 && !strings.Contains(w.Body.String(), `"status":500`) {
				t.Fatalf("%s: %d %s, want a 500", path, w.Code, w.Body)
			}
		}
		var lines []map[string]any
		for _, line := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			lines = append(lines, m)
		}
		sawError := false
		for _, m := range lines {
			if m["level"] != "DEBUG" && strings.Contains(fmt.Sprint(m), secretKey) {
				t.Errorf("a %v line names the key: %v", m["level"], m)
			}
			sawError = sawError || m["level"] == "ERROR" && strings.Contains(fmt.Sprint(m["err"]), "connection reset")
		}
		if !sawError {
			t.Errorf("level %v: no error logged with its cause: %s", level, logs.String())
		}
		if level == slog.LevelDebug && !strings.Contains(logs.String(), secretKey) {
			t.Errorf("at debug level the key is logged: %s", logs.String())
		}
	}
}
