package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quotaplatform/quota/rls"
)

const grpcCheckToken = "grpc-check-token-0123456789"

const daemonRLSConfig = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    value: vip
    rate_limit: {unlimited: true}
`

// grpcDaemon is the daemon with --grpc-listen and a client of it.
type grpcDaemon struct {
	*daemon
	grpc   *grpcServer
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient
	config string // the --rls-config file
}

func startGRPCDaemon(t *testing.T, mutate func(*Options)) *grpcDaemon {
	t.Helper()
	dir := t.TempDir()
	g := &grpcDaemon{config: filepath.Join(dir, "rls.yaml")}
	if err := os.WriteFile(g.config, []byte(daemonRLSConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, "", "", filepath.Join(dir, "data"))
	o.GRPCListen, o.RLSConfig, o.RLSResponseHeaders = "127.0.0.1:0", g.config, true
	o.CheckToken = grpcCheckToken
	if mutate != nil {
		mutate(&o)
	}
	g.daemon = startDaemon(t, o, fx.Populate(&g.grpc))
	var err error
	g.conn, err = grpc.NewClient(g.grpc.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.conn.Close() })
	g.client = rlsv3.NewRateLimitServiceClient(g.conn)
	return g
}

func authed(tok string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
}

func userRequest(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
	}}
}

// The daemon serves the rate limit service from --rls-config on the same
// limiter as the check API; every gRPC method needs the check token.
func TestGRPCDaemon(t *testing.T) {
	g := startGRPCDaemon(t, nil)
	health := healthpb.NewHealthClient(g.conn)

	// Refusals: no token, wrong token, the admin token (not a check token).
	for _, c := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"no token", context.Background(), codes.Unauthenticated},
		{"wrong token", authed("wrong-token-0123456789"), codes.PermissionDenied},
		{"admin token", authed(adminToken), codes.PermissionDenied},
	} {
		_, err := g.client.ShouldRateLimit(c.ctx, userRequest("a"))
		_, herr := health.Check(c.ctx, &healthpb.HealthCheckRequest{})
		if status.Code(err) != c.want || status.Code(herr) != c.want {
			t.Errorf("%s: ShouldRateLimit %v, Health %v; want %v", c.name, status.Code(err), status.Code(herr), c.want)
		}
	}
	ctx := authed(grpcCheckToken)
	hr, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}

	// 2 a minute per user; vip unlimited.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := g.client.ShouldRateLimit(ctx, userRequest("alice"))
		if err != nil || resp.OverallCode != want {
			t.Fatalf("alice #%d: %v %v, want %v", i, resp, err, want)
		}
		if i == 0 && !hasHeader(resp, "Ratelimit-Policy") {
			t.Errorf("no RateLimit-Policy header with --rls-response-headers: %v", resp.ResponseHeadersToAdd)
		}
	}
	for range 5 {
		if resp, err := g.client.ShouldRateLimit(ctx, userRequest("vip")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("vip: %v %v", resp, err)
		}
	}
	_, err = g.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: userRequest("a").Descriptors})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown domain: %v, want NotFound", err)
	}

	// The check API's keys still resolve through the catalogue.
	g.mustCall(t, "PUT", "/v1/limits/default", `{"rate":1,"capacity":3}`, true, 204)
	r := g.checkCall(t, `{"key":"acct_1","cost":1}`)
	if r.status != 200 || r.body["limit"] != float64(3) {
		t.Errorf("check API: %d %s", r.status, r.raw)
	}

	// The counters are on /metrics, labelled by domain only.
	m := g.mustCall(t, "GET", "/metrics", "", false, 200)
	for _, want := range []string{
		`quota_rls_hits_total{descriptor="",domain="edge",result="over_limit"} 1`,
		`quota_rls_hits_total{descriptor="",domain="edge",result="within_limit"} 2`,
		`quota_rls_config_loads_total{result="ok"} 1`,
	} {
		if !strings.Contains(m.raw, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// A changed file is in force within a second, without a restart.
	if err := os.WriteFile(g.config, []byte(strings.Replace(daemonRLSConfig, "requests_per_unit: 2", "requests_per_unit: 7", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	for {
		resp, err := g.client.ShouldRateLimit(ctx, userRequest("bob"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() == 7 {
			break
		}
		if time.Since(written) > 2*time.Second {
			t.Fatalf("the new limit was not in force after %v", time.Since(written))
		}
		time.Sleep(10 * time.Millisecond) // polling the answer, with a deadline
	}
	if took := time.Since(written); took > 1500*time.Millisecond {
		t.Errorf("new limit in force after %v (poll interval 1s)", took)
	}
}

func hasHeader(resp *rlsv3.RateLimitResponse, name string) bool {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == name {
			return true
		}
	}
	return false
}

// checkCall sends one check to /v1/allow with the check token.
func (g *grpcDaemon) checkCall(t *testing.T, body string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", g.base+"/v1/allow", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+grpcCheckToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// Without --check-token the gRPC surface is open, like the check API.
func TestGRPCOpenWithoutCheckToken(t *testing.T) {
	g := startGRPCDaemon(t, func(o *Options) { o.CheckToken = "" })
	if _, err := g.client.ShouldRateLimit(context.Background(), userRequest("a")); err != nil {
		t.Fatal(err)
	}
}

// An invalid --rls-config stops the start (newRLSRules fails, and with it
// fx.New), naming file, line and field.
func TestGRPCInvalidConfigRefusesStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: week, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, "", "", t.TempDir())
	o.GRPCListen, o.RLSConfig = "127.0.0.1:0", path
	_, _, _, err := newRLSRules(fxtest.NewLifecycle(t), o, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	want := "--rls-config: " + path + `:4: descriptors[0].rate_limit.unit: must be second, minute, hour or day, got "week"`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

func TestGRPCOptions(t *testing.T) {
	o := testOptions(t, "", "", t.TempDir())
	o.GRPCListen, o.RLSConfig = "127.0.0.1:0", filepath.Join(t.TempDir(), "x.yaml")
	if err := fx.ValidateApp(appOptions(o, io.Discard)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-listen", ":8081"}, "--grpc-listen: needs --rls-config"},
		{[]string{"--rls-config", "x.yaml"}, "--rls-config: needs --grpc-listen"},
		{[]string{"--rls-response-headers"}, "--rls-response-headers: needs --grpc-listen"},
	} {
		if _, err := parseOptions(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// ShouldRateLimit on the daemon (embedded defaults, --check-token, one
// descriptor with checkKeys runtime values, a limit no run exhausts):
// "grpc" through its gRPC server over a loopback connection (compare with
// BenchmarkCheckHTTP/daemon), "service" calling its rls.Service directly
// (compare with BenchmarkCheck/daemon):
//
//	go test -run '^$' -bench 'BenchmarkCheck|ShouldRateLimit' -benchmem ./cmd/regional-limiter/
func BenchmarkShouldRateLimit(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "rls.yaml")
	if err := os.WriteFile(path, []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	o.Listen, o.GRPCListen, o.RLSConfig = "127.0.0.1:0", "127.0.0.1:0", path
	o.DataDir, o.LogLevel, o.ShutdownDelay = filepath.Join(dir, "data"), "warn", 0
	o.CheckToken = grpcCheckToken
	var (
		srv *grpcServer
		svc *rls.Service
	)
	app := fx.New(appOptions(o, io.Discard), fx.Populate(&srv, &svc), fx.NopLogger)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Stop(ctx)
	})
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	reqs := make([]*rlsv3.RateLimitRequest, checkKeys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "lt_" + strconv.Itoa(i)}}},
		}}
	}
	actx := authed(grpcCheckToken)
	call := func(i int) {
		resp, err := client.ShouldRateLimit(actx, reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatalf("%v %v", resp, err)
		}
	}
	for i := range reqs { // every key's state exists, as at steady state
		call(i)
	}
	b.Run("grpc", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			call(i)
			i++
		}
	})
	b.Run("service", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if resp, err := svc.ShouldRateLimit(actx, reqs[i%len(reqs)]); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatalf("%v %v", resp, err)
			}
			i++
		}
	})
}
