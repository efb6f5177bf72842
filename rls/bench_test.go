package rls_test

import (
	"context"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/quotaplatform/quota/clock"
)

// ShouldRateLimit of one descriptor over a real loopback gRPC connection,
// cycling through benchKeys runtime values (one limiter key each) under a
// limit no benchmark exhausts, on the system clock:
//
//	go test -run '^$' -bench ShouldRateLimit -benchmem ./rls/
//
// allocs/op holds the gRPC client's and server's allocations; the Service
// sub-benchmark calls the Service directly (the handler's own cost, to
// compare with cmd/regional-limiter's BenchmarkCheck/daemon).
const benchKeys = 10000

const benchConfig = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4000000000}
`

func benchRequests() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, benchKeys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "u"+strconv.Itoa(i))}}
	}
	return reqs
}

func BenchmarkShouldRateLimit(b *testing.B) {
	h := startHarness(b, mustParse(b, benchConfig), harnessOptions{clk: clock.System()})
	reqs := benchRequests()
	ctx := context.Background()
	call := func(i int) {
		resp, err := h.client.ShouldRateLimit(ctx, reqs[i%len(reqs)])
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
	b.Run("grpc-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				call(i)
				i += 7
			}
		})
	})
	b.Run("service", func(b *testing.B) {
		svc := h.service
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
