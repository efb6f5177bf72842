package rls_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/rls"
)

// harness is a Service on a real region.Limiter over the in-memory store,
// served by NewGRPCServer on a loopback port, and a client of it. The
// limiter's clock is manual and never moves unless a test moves it, so
// buckets do not refill behind a test's back.
type harness struct {
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	rules  *rls.Rules
	lim    *region.Limiter
	calls  *countingLimiter
	reg    *prometheus.Registry
	// service is the Service the server serves, for calls without gRPC.
	service *rls.Service
}

type harnessOptions struct {
	tokens  []string
	headers bool
	clk     clock.Clock // default a manual clock
}

func startHarness(t testing.TB, cfg *rls.Config, ho harnessOptions) *harness {
	t.Helper()
	h := &harness{rules: &rls.Rules{}, reg: prometheus.NewRegistry()}
	h.rules.Set(cfg)
	clk := ho.clk
	if clk == nil {
		clk = clock.NewManual(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	}
	plans, err := rls.NewPlans(h.rules, region.StaticPlans{})
	if err != nil {
		t.Fatal(err)
	}
	lcfg := region.DefaultConfig()
	lcfg.Clock = clk
	h.lim, err = region.New(memstore.New(clk), plans, lcfg)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := rls.NewMetrics(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	h.calls = &countingLimiter{lim: h.lim}
	svc, err := rls.New(rls.ServiceConfig{Limiter: h.calls, Rules: h.rules, ResponseHeaders: ho.headers, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	h.service = svc
	srv, _ := rls.NewGRPCServer(svc, ho.tokens)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	h.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h.client = rlsv3.NewRateLimitServiceClient(h.conn)
	t.Cleanup(func() {
		h.conn.Close()
		srv.Stop()
		<-done
	})
	return h
}

// countingLimiter counts the decisions that reach the limiter.
type countingLimiter struct {
	lim   *region.Limiter
	calls atomic.Int64
}

func (c *countingLimiter) Allow(ctx context.Context, key string, cost int64) (region.Decision, error) {
	c.calls.Add(1)
	return c.lim.Allow(ctx, key, cost)
}

// desc is a request descriptor of key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func mustParse(t testing.TB, yaml string) *rls.Config {
	t.Helper()
	c, err := rls.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
