package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/rls"
)

// -mode grpc against a rate limit service on a real limiter, with a check
// token.
func TestRunGRPCSmoke(t *testing.T) {
	const tok = "check-0123456789abcdef"
	cfg, err := rls.Parse("lt.yaml", []byte("domain: loadtest\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules := &rls.Rules{}
	rules.Set(cfg)
	plans, err := rls.NewPlans(rules, region.StaticPlans{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := region.New(memstore.New(nil), plans, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.ServiceConfig{Limiter: lim, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := rls.NewGRPCServer(svc, []string{tok})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	defer func() { srv.Stop(); <-done }()
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ready.Close()

	for _, tc := range []struct {
		name, token string
		errors      bool
	}{{"token", tok, false}, {"no token", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c := config{url: ready.URL, grpcAddr: ln.Addr().String(), domain: "loadtest", descKey: "user", mode: "grpc",
				duration: 150 * time.Millisecond, concurrency: 2, batch: 1, keys: 50, half: true, wait: time.Second, checkToken: tc.token}
			if err := run(c, &out); err != nil {
				t.Fatal(err)
			}
			for _, phase := range []string{"grpc ", "grpc @50%"} {
				if !strings.Contains(out.String(), phase) {
					t.Errorf("report lacks %q:\n%s", phase, out.String())
				}
			}
			if got := strings.Contains(out.String(), "Unauthenticated"); got != tc.errors {
				t.Errorf("Unauthenticated errors reported: %v, want %v:\n%s", got, tc.errors, out.String())
			}
		})
	}
}
