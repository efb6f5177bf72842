package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/quotaplatform/quota/internal/edge"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
)

const (
	tokOld    = "old-0123456789abcdef"
	tokNew    = "new-0123456789abcdef"
	tokTenant = "t42-0123456789abcdef"
)

// daemon is a reconciler serve app built by serveModule, as main builds
// it, on a fresh migrated database and a private NATS.
type daemon struct {
	base   string
	routes []route
	mux    *http.ServeMux
	pool   *pgxpool.Pool // the writer's
	bill   billingPool
}

func startDaemon(t *testing.T, edit func(*options)) *daemon {
	t.Helper()
	db := ledgertest.MigratedDatabase(t)
	o := defaultOptions()
	o.NATS = testserver.StartNATS(t).URL
	o.Postgres = db
	o.Listen = fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	o.ShutdownDelay = 0
	edit(&o)
	d := &daemon{base: "http://" + o.Listen}
	app := fx.New(serveModule(o, slog.New(slog.DiscardHandler)), fx.Populate(&d.routes, &d.mux, &d.pool, &d.bill))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		resp, err := http.Get(d.base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	return d
}

// The mux serves exactly the routes table, and each route refuses callers
// the table does not name, over real HTTP against the daemon's handlers
// and Postgres.
func TestRoutes(t *testing.T) {
	d := startDaemon(t, func(o *options) {
		o.BillingToken = edge.Secret(tokOld + "," + tokNew + ",prefix:acct_42_=" + tokTenant)
		o.Billing.MaxRows = 48
		o.Billing.StatementTimeout = 1500 * time.Millisecond
		o.BillingMaxConns = 3
	})

	t.Run("mux serves the table and nothing else", func(t *testing.T) {
		var patterns []string
		for _, rt := range d.routes {
			if rt.caller == "" || slices.Contains(patterns, rt.pattern) {
				t.Errorf("route %q: empty caller or listed twice", rt.pattern)
			}
			patterns = append(patterns, rt.pattern)
			method, path, _ := strings.Cut(rt.pattern, " ")
			if _, got := d.mux.Handler(httptest.NewRequest(method, path, nil)); got != rt.pattern {
				t.Errorf("%s is served by %q, want %q", path, got, rt.pattern)
			}
		}
		// Any other route would answer one of these.
		probes := []string{"/", "/x", "/v1", "/v1/", "/v1/usage/", "/v1/usage/x", "/v1/usage/export/", "/v1/usage/quotas/", "/v1/keys/k", "/v1/allow", "/metrics/",
			"/healthz/", "/readyz/", "/debug/pprof/", "/debug/vars", "/admin", "/api", "/usage", "/v2/usage", "/favicon.ico"}
		for _, p := range probes {
			for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
				if _, got := d.mux.Handler(httptest.NewRequest(m, p, nil)); got != "" && !slices.Contains(patterns, got) {
					t.Errorf("%s %s is served by %q, which the routes table does not list", m, p, got)
				}
			}
		}
	})

	const rng = "&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z"
	tests := []struct {
		name   string
		method string
		path   string
		auth   string
		status int
		field  string // of a JSON error body
	}{
		{"usage, no token", "GET", "/v1/usage?key=k" + rng, "", 401, "Authorization"},
		{"usage, basic auth", "GET", "/v1/usage?key=k" + rng, "Basic " + tokOld, 401, "Authorization"},
		{"usage, wrong token", "GET", "/v1/usage?key=k" + rng, "Bearer " + tokOld + "x", 403, "Authorization"},
		{"usage, old token", "GET", "/v1/usage?key=k" + rng, "Bearer " + tokOld, 200, ""},
		{"usage, new token", "GET", "/v1/usage?key=k" + rng, "Bearer " + tokNew, 200, ""},
		{"usage, HEAD", "HEAD", "/v1/usage?key=k" + rng, "Bearer " + tokNew, 200, ""},
		{"usage, tenant's own key", "GET", "/v1/usage?key=acct_42_a" + rng, "Bearer " + tokTenant, 200, ""},
		{"usage, tenant's other key", "GET", "/v1/usage?key=acct_43_a" + rng, "Bearer " + tokTenant, 403, "key"},
		{"usage, bad query", "GET", "/v1/usage?key=k&from=yesterday", "Bearer " + tokOld, 400, "from"},
		{"usage, over the row limit", "GET", "/v1/usage?key=k&from=2026-01-01T00:00:00Z&to=2026-01-03T00:00:01Z", "Bearer " + tokOld, 400, "to"},
		{"usage, POST", "POST", "/v1/usage?key=k" + rng, "Bearer " + tokOld, 405, ""},
		{"quotas, no token", "GET", "/v1/usage/quotas?key=k", "", 401, "Authorization"},
		{"quotas, basic auth", "GET", "/v1/usage/quotas?key=k", "Basic " + tokOld, 401, "Authorization"},
		{"quotas, wrong token", "GET", "/v1/usage/quotas?key=k", "Bearer " + tokOld + "x", 403, "Authorization"},
		{"quotas, token", "GET", "/v1/usage/quotas?key=k&at=2026-03-01T00:00:00Z", "Bearer " + tokOld, 200, ""},
		{"quotas, HEAD", "HEAD", "/v1/usage/quotas?key=k", "Bearer " + tokNew, 200, ""},
		{"quotas, tenant's own key", "GET", "/v1/usage/quotas?key=acct_42_a", "Bearer " + tokTenant, 200, ""},
		{"quotas, tenant's other key", "GET", "/v1/usage/quotas?key=acct_43_a", "Bearer " + tokTenant, 403, "key"},
		{"quotas, no key", "GET", "/v1/usage/quotas", "Bearer " + tokOld, 400, "key"},
		{"quotas, bad at", "GET", "/v1/usage/quotas?key=k&at=noon", "Bearer " + tokOld, 400, "at"},
		{"quotas, POST", "POST", "/v1/usage/quotas?key=k", "Bearer " + tokOld, 405, ""},
		{"export, no token", "GET", "/v1/usage/export?from=2026-11&to=2026-12", "", 401, "Authorization"},
		{"export, wrong token", "GET", "/v1/usage/export?from=2026-11&to=2026-12", "Bearer " + tokOld + "x", 403, "Authorization"},
		{"export, token", "GET", "/v1/usage/export?from=2026-11&to=2026-12&format=csv", "Bearer " + tokOld, 200, ""},
		{"export, tenant", "GET", "/v1/usage/export?from=2026-11&to=2026-12", "Bearer " + tokTenant, 200, ""},
		{"export, bad query", "GET", "/v1/usage/export?from=2026-11-02&to=2026-12", "Bearer " + tokOld, 400, "from"},
		{"export, POST", "POST", "/v1/usage/export?from=2026-11&to=2026-12", "Bearer " + tokOld, 405, ""},
		{"metrics, no token", "GET", "/metrics", "", 200, ""},
		{"healthz, no token", "GET", "/healthz", "", 200, ""},
		{"readyz, no token", "GET", "/readyz", "", 200, ""},
		{"unlisted path", "GET", "/debug/pprof/", "Bearer " + tokOld, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, d.base+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without WWW-Authenticate: Bearer")
			}
			if tt.field != "" {
				var e map[string]string
				if err := json.Unmarshal(body, &e); err != nil || e["field"] != tt.field || e["error"] == "" {
					t.Fatalf("body %s, want a JSON error naming %q", body, tt.field)
				}
			}
		})
	}

	// Every route the table protects refuses a request without a token.
	for _, rt := range d.routes {
		method, path, _ := strings.Cut(rt.pattern, " ")
		resp, err := http.DefaultClient.Do(must(http.NewRequest(method, d.base+path, nil)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if refused := resp.StatusCode == 401 || resp.StatusCode == 403; refused != rt.token {
			t.Errorf("%s without a token: %d; the table says token=%v", rt.pattern, resp.StatusCode, rt.token)
		}
	}

	t.Run("billing pool", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var timeout string
		if err := d.bill.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil || timeout != "1500ms" {
			t.Errorf("billing pool statement_timeout = %q, %v; want 1500ms (--billing-statement-timeout)", timeout, err)
		}
		if got := d.bill.Config().MaxConns; got != 3 {
			t.Errorf("billing pool MaxConns = %d, want 3 (--billing-max-conns)", got)
		}
		if d.bill.Pool == d.pool {
			t.Error("billing queries share the writer's pool")
		}
		if err := d.pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil || timeout != "0" {
			t.Errorf("writer pool statement_timeout = %q, %v; want 0 (ingestion is not bounded by billing's timeout)", timeout, err)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestHTTPServerLimits(t *testing.T) {
	o := defaultOptions()
	srv := newHTTPServer(o, http.NotFoundHandler())
	tests := []struct {
		name string
		got  time.Duration
		min  time.Duration
	}{
		{"ReadHeaderTimeout", srv.ReadHeaderTimeout, time.Second},
		{"ReadTimeout", srv.ReadTimeout, srv.ReadHeaderTimeout},
		{"WriteTimeout", srv.WriteTimeout, o.Billing.StatementTimeout + time.Second},
		{"IdleTimeout", srv.IdleTimeout, time.Second},
	}
	for _, tt := range tests {
		if tt.got < tt.min || tt.got > 5*time.Minute+writeTimeoutSlack {
			t.Errorf("%s = %v, want %v to %v", tt.name, tt.got, tt.min, 5*time.Minute+writeTimeoutSlack)
		}
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 64<<10 {
		t.Errorf("MaxHeaderBytes = %d", srv.MaxHeaderBytes)
	}
}

// ledger/README.md and docs/security.md list every route with who
// may call it.
func TestRoutesDocumented(t *testing.T) {
	routes, err := newRoutes(defaultOptions(), nil, nil, nil, nil, nil, newReadiness(), nil, newRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../../ledger/README.md", "../../docs/security.md"} {
		readme, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range routes {
			method, path, _ := strings.Cut(rt.pattern, " ")
			row := fmt.Sprintf("| `%s` | %s |", path, method)
			if !strings.Contains(string(readme), row) {
				t.Errorf("%s has no route row starting %q", name, row)
			}
		}
	}
}
