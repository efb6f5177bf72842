package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// runGRPC drives Envoy's rate limit service on c.grpcAddr: each request
// is one ShouldRateLimit with one descriptor {c.descKey: lt_<n>}, n one of
// c.keys values, over one connection per worker. The daemon's
// --rls-config must configure c.domain with a limit on c.descKey.
func runGRPC(client *http.Client, c config, out io.Writer) error {
	conns := make([]*grpc.ClientConn, c.concurrency)
	clients := make([]rlsv3.RateLimitServiceClient, c.concurrency)
	for i := range conns {
		conn, err := grpc.NewClient(c.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("-grpc-addr %s: %w", c.grpcAddr, err)
		}
		defer conn.Close()
		conns[i], clients[i] = conn, rlsv3.NewRateLimitServiceClient(conn)
	}
	ctx := context.Background()
	if c.checkToken != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.checkToken)
	}
	values := make([]string, c.keys)
	for i := range values {
		values[i] = "lt_" + strconv.Itoa(i)
	}
	check := func(w int, rng *rand.Rand) (int64, error) {
		req := &rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: c.descKey, Value: values[rng.IntN(len(values))]}}},
		}}
		resp, err := clients[w].ShouldRateLimit(ctx, req)
		if err != nil {
			return 0, err
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			return 1, nil
		}
		return 0, nil
	}
	printHeader(out, "grpc://"+c.grpcAddr, c)
	r := measured(client, c, 1, c.rate, check)
	r.print(out, "grpc")
	if c.half && c.rate == 0 {
		h := measured(client, c, 1, r.decisionsPerSec()/2, check)
		h.print(out, "grpc @50%")
	}
	return nil
}
