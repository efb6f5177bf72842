package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/testserver"
)

func edgeRules(perMinute int) string {
	return fmt.Sprintf("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", perMinute)
}

// Two daemons on one NATS: the control plane takes a domain's rules with
// PUT /v1/rls/{domain}, and the other, with --rls-config catalog:, answers
// ShouldRateLimit under them within a second. YAML that does not parse is
// refused with its line and field and the rules in force stay, also when
// it reaches the bucket around the route; a deleted domain is NotFound.
func TestRLSFromCatalog(t *testing.T) {
	ns := testserver.StartNATS(t)
	cp := startDaemon(t, testOptions(t, "", ns.URL, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cp.cat.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}

	o := testOptions(t, "", ns.URL, filepath.Join(t.TempDir(), "data"))
	o.ControlPlane = false
	o.GRPCListen, o.RLSConfig, o.CheckToken = "127.0.0.1:0", "catalog:", grpcCheckToken
	var srv *grpcServer
	// pushed hears every change B's catalogue applies, after the rate
	// limit rules' own subscriber (registered by an earlier invoke).
	pushed := make(chan struct{}, 64)
	b := startDaemon(t, o, fx.Populate(&srv), fx.Invoke(func(c *catalog.Catalog) {
		c.OnChange(func() {
			select {
			case pushed <- struct{}{}:
			default:
			}
		})
	}))
	if err := b.cat.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	rctx := authed(grpcCheckToken)
	// limitOnB is B's answer for a fresh user: the limit in force, 0 when
	// the domain is unknown.
	n := 0
	limitOnB := func() uint32 {
		t.Helper()
		n++
		resp, err := client.ShouldRateLimit(rctx, userRequest(fmt.Sprintf("u%d", n)))
		if status.Code(err) == codes.NotFound {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := limitOnB(); got != 0 {
		t.Fatalf("before any rules: limit %d, want the domain unknown", got)
	}

	cases := []struct {
		name   string
		method string
		body   string
		status int
		// field and line of a 400.
		field string
		line  float64
		// bypass writes body to the bucket directly (catalog.PutRLS),
		// as a tool other than the route could.
		bypass bool
		// limit is B's limit after (0: the domain is unknown).
		limit uint32
	}{
		{name: "new domain", method: "PUT", body: edgeRules(2), status: 204, limit: 2},
		{name: "changed limit", method: "PUT", body: edgeRules(9), status: 204, limit: 9},
		{name: "bad unit", method: "PUT", body: strings.Replace(edgeRules(3), "minute", "week", 1), status: 400,
			field: "descriptors[0].rate_limit.unit", line: 4, limit: 9},
		{name: "YAML syntax", method: "PUT", body: "domain: edge\ndescriptors:\n  - key: user\n    value: a: b\n", status: 400,
			field: "body", line: 4, limit: 9},
		{name: "another domain's YAML", method: "PUT", body: strings.Replace(edgeRules(3), "edge", "api", 1), status: 400,
			field: "domain", line: 1, limit: 9},
		{name: "empty body", method: "PUT", body: "", status: 400, field: "body", limit: 9},
		{name: "body too large", method: "PUT", body: edgeRules(3) + strings.Repeat("#", catalog.MaxRLSBytes), status: 413, field: "body", limit: 9},
		{name: "bad YAML around the route", bypass: true, body: strings.Replace(edgeRules(3), "minute", "fortnight", 1), limit: 9},
		{name: "good YAML after a bad entry", method: "PUT", body: edgeRules(4), status: 204, limit: 4},
		{name: "deleted", method: "DELETE", status: 204, limit: 0},
		{name: "deleted again", method: "DELETE", status: 404, field: "domain", limit: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for len(pushed) > 0 {
				<-pushed
			}
			before := cp.cat.Version()
			written := time.Now()
			if tc.bypass {
				if _, err := cp.cat.PutRLS(context.Background(), "tool", "edge", tc.body); err != nil {
					t.Fatal(err)
				}
			} else {
				r := cp.call(t, tc.method, "/v1/rls/edge", tc.body, true)
				if r.status != tc.status || (tc.field != "" && r.body["field"] != tc.field) || (tc.line != 0 && r.body["line"] != tc.line) {
					t.Fatalf("%s: %d %s; want %d, field %q, line %v", tc.method, r.status, r.raw, tc.status, tc.field, tc.line)
				}
				if tc.status >= 400 {
					if cp.cat.Version() != before {
						t.Fatalf("a refused request changed the catalogue: version %d → %d", before, cp.cat.Version())
					}
					if got := limitOnB(); got != tc.limit {
						t.Fatalf("limit on B %d after a refused request, want %d", got, tc.limit)
					}
					return
				}
			}
			if tc.bypass {
				// The bad entry is pushed to B (pushed hears it after the
				// rules' subscriber refused it): counted, the old rules stay.
				select {
				case <-pushed:
				case <-time.After(time.Second):
					t.Fatal("the bad entry did not reach B within a second")
				}
				if m := b.call(t, "GET", "/metrics", "", false); !strings.Contains(m.raw, `quota_rls_config_loads_total{result="error"} 1`) {
					t.Fatal("B did not count the refused entry")
				}
				if got := limitOnB(); got != tc.limit {
					t.Fatalf("limit on B %d after a bad entry, want the last good %d", got, tc.limit)
				}
				return
			}
			// Wait for B's pushes until its answer is the one wanted, for
			// at most a second.
			deadline := time.After(time.Second)
			for got := limitOnB(); got != tc.limit; got = limitOnB() {
				select {
				case <-pushed:
				case <-deadline:
					t.Fatalf("limit on B still %d a second after the write, want %d", got, tc.limit)
				}
			}
			t.Logf("in force on B after %v", time.Since(written))
		})
	}

	// GET answers the stored YAML, as JSON or alone; B reads it too.
	cp.mustCall(t, "PUT", "/v1/rls/edge", edgeRules(5), true, 204)
	if err := b.cat.WaitVersion(ctx, cp.cat.Version()); err != nil {
		t.Fatal(err)
	}
	r := b.mustCall(t, "GET", "/v1/rls/edge", "", true, 200)
	if r.body["domain"] != "edge" || r.body["yaml"] != edgeRules(5) || r.body["actor"] != "admin" {
		t.Errorf("GET: %s", r.raw)
	}
	r = cp.mustCall(t, "GET", "/v1/rls/nope", "", true, 404)
	if r.body["field"] != "domain" {
		t.Errorf("GET unknown: %s", r.raw)
	}
	// B is not the control plane: it does not write.
	if r := b.call(t, "PUT", "/v1/rls/edge", edgeRules(6), true); r.status != 403 {
		t.Errorf("PUT on a process that is not the control plane: %d %s", r.status, r.raw)
	}
}

// GET with Accept: application/yaml answers the YAML alone.
func TestRLSGetYAML(t *testing.T) {
	d := startDaemon(t, testOptions(t, "", "", t.TempDir()))
	d.mustCall(t, "PUT", "/v1/rls/edge", edgeRules(3), true, 204)
	for _, c := range []struct {
		accept, wantType string
	}{
		{"application/yaml", "application/yaml"},
		{"text/yaml, application/json", "application/yaml"},
		{"application/json", "application/json"},
		{"", "application/json"},
	} {
		req, err := http.NewRequest("GET", d.base+"/v1/rls/edge", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if c.accept != "" {
			req.Header.Set("Accept", c.accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		raw := string(b)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.wantType {
			t.Errorf("Accept %q: %d %s %s", c.accept, resp.StatusCode, resp.Header.Get("Content-Type"), raw)
		}
		if c.wantType == "application/yaml" && raw != edgeRules(3) {
			t.Errorf("Accept %q: body %q", c.accept, raw)
		}
	}
}

// --rls-config catalog: builds the graph with the catalogue's watch in
// place of the file watcher; it still needs --grpc-listen.
func TestRLSCatalogOptions(t *testing.T) {
	o := testOptions(t, "", "", t.TempDir())
	o.GRPCListen, o.RLSConfig = "127.0.0.1:0", rlsFromCatalog
	if err := fx.ValidateApp(appOptions(o, io.Discard)); err != nil {
		t.Fatal(err)
	}
	if _, err := parseOptions([]string{"--rls-config", "catalog:"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--rls-config: needs --grpc-listen") {
		t.Fatalf("--rls-config catalog: without --grpc-listen: %v", err)
	}
	if _, err := parseOptions([]string{"--rls-config", "catalog:", "--grpc-listen", ":0"}, io.Discard); err != nil {
		t.Fatal(err)
	}
}
