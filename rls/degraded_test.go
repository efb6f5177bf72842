package rls_test

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/redisstore"
	"github.com/quotaplatform/quota/rls"
)

// A decision taken while the regional store is unavailable is flagged in
// the response headers (X-Ratelimit-Degraded, as the check API flags it),
// and Config.Key names the limiter key the descriptor spent from, on a
// real Redis that the test stops.
func TestDegradedHeaderAndKey(t *testing.T) {
	rs := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	cfg := mustParse(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000}\n  - key: free\n    rate_limit: {unlimited: true}\n")
	rules := &rls.Rules{}
	rules.Set(cfg)
	plans, err := rls.NewPlans(rules, region.StaticPlans{})
	if err != nil {
		t.Fatal(err)
	}
	lcfg := region.DefaultConfig()
	lcfg.Clock = clock.NewManual(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	lcfg.StoreTimeout = time.Second // the first failures must be failures, not a loaded machine's timeouts
	lim, err := region.New(redisstore.New(rdb, ""), plans, lcfg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.ServiceConfig{Limiter: lim, Rules: rules, ResponseHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	for _, c := range []struct {
		name      string
		user      string
		stopStore bool
		degraded  string // the header's value; "" absent
	}{
		{"store up", "alice", false, ""},
		{"store down", "bob", true, "degraded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.stopStore {
				rs.Stop()
			}
			entries := []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: c.user}}
			resp, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries}}})
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("%v %v", resp, err)
			}
			got := ""
			for _, h := range resp.ResponseHeadersToAdd {
				if h.Key == httplimit.HeaderDegraded {
					got = h.Value
				}
			}
			if got != c.degraded {
				t.Errorf("%s = %q, want %q (headers %v)", httplimit.HeaderDegraded, got, c.degraded, resp.ResponseHeadersToAdd)
			}
			key, ok := cfg.Key("edge", entries)
			if !ok {
				t.Fatal("Config.Key: no key for a limited descriptor")
			}
			if _, err := lim.Peek(key); err != nil {
				t.Errorf("Config.Key = %q, which the limiter does not track: %v", key, err)
			}
		})
	}
	for _, c := range []struct {
		domain  string
		entries []*rlv3.RateLimitDescriptor_Entry
	}{
		{"nope", []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}},
		{"edge", []*rlv3.RateLimitDescriptor_Entry{{Key: "free", Value: "a"}}},
		{"edge", []*rlv3.RateLimitDescriptor_Entry{{Key: "other", Value: "a"}}},
		{"edge", nil},
	} {
		if key, ok := cfg.Key(c.domain, c.entries); ok {
			t.Errorf("Config.Key(%s, %v) = %q, want none (not limited)", c.domain, c.entries, key)
		}
	}
}
