package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/limitapi"
)

const (
	checkOld  = "check-old-0123456789"
	checkNew  = "check-new-0123456789"
	readTok   = "read-0123456789abcdef"
	wrongTok  = "wrong-0123456789abcdef"
	noneOfAll = ""
)

// routeRequest is a request to rt with its wildcards filled in and a valid
// body, carrying "Authorization: Bearer tok" unless tok is "".
func routeRequest(t *testing.T, base string, rt limitapi.Route, tok string) *http.Request {
	t.Helper()
	method, path, _ := strings.Cut(rt.Pattern, " ")
	path = strings.NewReplacer("{plan}", "pro", "{key}", "acct_1", "{endpoint}", "search", "{domain}", "edge").Replace(path)
	body := map[string]string{
		"POST /v1/allow":           `{"key":"acct_1"}`,
		"POST /v1/allow/batch":     `{"checks":[{"key":"acct_1"}]}`,
		"POST /v1/refund":          `{"key":"acct_1","cost":1,"request_id":"r1"}`,
		"POST /v1/charge":          `{"key":"acct_1","cost":1,"request_id":"r1"}`,
		"PUT /v1/limits/{plan}":    `{"rate":100,"capacity":100}`,
		"PUT /v1/keys/{key}":       `{"plan":"pro"}`,
		"PUT /v1/costs/{endpoint}": `{"cost":2}`,
		"PUT /v1/rls/{domain}":     "domain: edge\ndescriptors: []\n",
	}[rt.Pattern]
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req
}

// The mux serves exactly the route table, each route refuses the callers
// the table does not name (over real HTTP, against the daemon's handlers),
// and README.md here and docs/security.md list every route with
// who may call it.
func TestRoutes(t *testing.T) {
	o := testOptions(t, "", "", t.TempDir())
	o.CheckToken = checkOld + "," + checkNew
	o.ReadToken = readTok
	var (
		routes routeTable
		mux    *http.ServeMux
	)
	d := startDaemon(t, o, fx.Populate(&routes, &mux))

	t.Run("mux serves the table and nothing else", func(t *testing.T) {
		var patterns []string
		for _, rt := range routes {
			if rt.Caller == "" || slices.Contains(patterns, rt.Pattern) {
				t.Errorf("route %q: empty caller or listed twice", rt.Pattern)
			}
			patterns = append(patterns, rt.Pattern)
			req := routeRequest(t, "", rt, "")
			if _, got := mux.Handler(httptest.NewRequest(req.Method, req.URL.Path, nil)); got != rt.Pattern {
				t.Errorf("%s %s is served by %q, want %q", req.Method, req.URL.Path, got, rt.Pattern)
			}
		}
		// Any other route would answer one of these.
		probes := []string{"/", "/x", "/v1", "/v1/", "/v1/allow/", "/v1/allow/x", "/v1/keys", "/v1/keys/", "/v1/keys/k/x",
			"/v1/limits/", "/v1/costs/", "/v1/rls", "/v1/rls/", "/v1/rls/edge/x", "/v1/usage", "/v2/allow", "/metrics/", "/healthz/", "/readyz/", "/debug/",
			"/debug/shares/", "/debug/pprof/", "/debug/vars", "/admin", "/favicon.ico"}
		for _, p := range probes {
			for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
				if _, got := mux.Handler(httptest.NewRequest(m, p, nil)); got != "" && !slices.Contains(patterns, got) {
					t.Errorf("%s %s is served by %q, which the route table does not list", m, p, got)
				}
			}
		}
	})

	// Who passes each Access with these flags; every other token is refused.
	passes := map[limitapi.Access][]string{
		limitapi.AccessAnyone: {noneOfAll, wrongTok, checkOld, checkNew, readTok, adminToken},
		limitapi.AccessCheck:  {checkOld, checkNew},
		limitapi.AccessRead:   {readTok, adminToken},
		limitapi.AccessAdmin:  {adminToken},
	}
	for _, rt := range routes {
		t.Run(rt.Pattern, func(t *testing.T) {
			for _, tok := range []string{noneOfAll, wrongTok, checkOld, checkNew, readTok, adminToken} {
				resp, err := http.DefaultClient.Do(routeRequest(t, d.base, rt, tok))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				ok := slices.Contains(passes[rt.Access], tok)
				switch {
				case ok && (resp.StatusCode == 401 || resp.StatusCode == 403):
					t.Errorf("token %q refused: %d %s", tok, resp.StatusCode, body)
				case ok && resp.StatusCode >= 500 && resp.StatusCode != 501:
					t.Errorf("token %q: %d %s", tok, resp.StatusCode, body)
				case !ok && tok == "" && resp.StatusCode != 401:
					t.Errorf("no token: %d %s, want 401", resp.StatusCode, body)
				case !ok && tok == "" && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer"):
					t.Errorf("401 without WWW-Authenticate: Bearer")
				case !ok && tok != "" && resp.StatusCode != 403:
					t.Errorf("token %q: %d %s, want 403", tok, resp.StatusCode, body)
				}
			}
		})
	}

	t.Run("READMEs list every route", func(t *testing.T) {
		for _, name := range []string{"README.md", "../../docs/security.md"} {
			readme, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, rt := range routes {
				method, path, _ := strings.Cut(rt.Pattern, " ")
				row := fmt.Sprintf("| `%s` | %s | %s |", path, method, rt.Access)
				if !strings.Contains(string(readme), row) {
					t.Errorf("%s has no route row starting %q", name, row)
				}
			}
		}
	})
}
