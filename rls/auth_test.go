package rls_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

const (
	tokOld = "check-old-0123456789"
	tokNew = "check-new-0123456789"
)

// Every method the server serves (the rate limit service, health, and
// reflection) refuses a call without a check token (Unauthenticated) and
// with a wrong one (PermissionDenied), and serves either listed token.
func TestAuth(t *testing.T) {
	h := startHarness(t, mustParse(t, edgeConfig), harnessOptions{tokens: []string{tokOld, tokNew}})
	health := healthpb.NewHealthClient(h.conn)
	refl := reflectionpb.NewServerReflectionClient(h.conn)
	methods := map[string]func(ctx context.Context) error{
		"ShouldRateLimit": func(ctx context.Context) error {
			_, err := h.client.ShouldRateLimit(ctx, req(0, desc("remote_address", "9.9.9.9")))
			return err
		},
		"Health.Check": func(ctx context.Context) error {
			_, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
			return err
		},
		"Health.Watch": func(ctx context.Context) error {
			s, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"ServerReflectionInfo": func(ctx context.Context) error {
			s, err := refl.ServerReflectionInfo(ctx)
			if err != nil {
				return err
			}
			// A refused stream may end before Send: its status comes
			// with Recv (Send then reports io.EOF).
			_ = s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			_, err = s.Recv()
			s.CloseSend()
			return err
		},
	}
	creds := []struct {
		name string
		md   []string // metadata pairs
		want codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"not bearer", []string{"authorization", "Basic " + tokOld}, codes.Unauthenticated},
		{"two tokens", []string{"authorization", "Bearer " + tokOld, "authorization", "Bearer " + tokNew}, codes.Unauthenticated},
		{"wrong token", []string{"authorization", "Bearer wrong-0123456789abc"}, codes.PermissionDenied},
		{"admin-like token", []string{"authorization", "Bearer " + tokOld + "x"}, codes.PermissionDenied},
		{"old token", []string{"authorization", "Bearer " + tokOld}, codes.OK},
		{"new token, scheme in any case", []string{"authorization", "bearer " + tokNew}, codes.OK},
	}
	for name, call := range methods {
		for _, c := range creds {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if c.md != nil {
					ctx = metadata.AppendToOutgoingContext(ctx, c.md...)
				}
				if got := status.Code(call(ctx)); got != c.want {
					t.Errorf("%v, want %v", got, c.want)
				}
			})
		}
	}
}

// Without tokens, calls need none.
func TestNoAuth(t *testing.T) {
	h := startHarness(t, mustParse(t, edgeConfig), harnessOptions{})
	if _, err := h.client.ShouldRateLimit(context.Background(), req(0, desc("remote_address", "9.9.9.9"))); err != nil {
		t.Fatal(err)
	}
}
