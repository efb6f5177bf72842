package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/quotaplatform/quota/bearer"
)

// ServiceName is the gRPC service Service implements.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// NewGRPCServer returns a gRPC server (not yet serving) with svc, gRPC
// health checking (both "" and ServiceName report SERVING until
// health.Server.Shutdown) and server reflection. With tokens, every method
// of all three needs the metadata "authorization: Bearer <token>" with one
// of them: without it (or not a Bearer one) the call fails Unauthenticated,
// with another token PermissionDenied. Without tokens every caller is
// served. opts are added to the server's options.
func NewGRPCServer(svc *Service, tokens []string, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	if len(tokens) > 0 {
		a := auth{tokens: bearer.NewSet(tokens...)}
		opts = append(opts, grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream))
	}
	srv := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs
}

// auth checks the bearer token of every call.
type auth struct{ tokens bearer.Set }

func (a auth) check(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return status.Error(codes.Unauthenticated, "calls need the metadata authorization: Bearer <check token>")
	}
	tok, ok := bearer.FromHeader(vals[0])
	if !ok || len(vals) > 1 {
		return status.Error(codes.Unauthenticated, "authorization: want one Bearer <check token>")
	}
	if a.tokens.Index(tok) < 0 {
		return status.Error(codes.PermissionDenied, "wrong check token")
	}
	return nil
}

func (a auth) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a auth) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := a.check(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}
