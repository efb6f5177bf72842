package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/quotaplatform/quota/region"
)

// Limiter is what the middleware needs of a region.Limiter.
type Limiter interface {
	Allow(ctx context.Context, key string, cost int64) (region.Decision, error)
	// EndpointCost returns endpoint's weight.
	EndpointCost(endpoint string) (int64, error)
}

// Plans names a key's plan for the RateLimit-Policy field; the catalog
// package's Catalog is one.
type Plans interface {
	Resolve(key string) (string, region.Plan, error)
}

// Config configures Middleware. Only Limiter is required.
type Config struct {
	// Limiter decides.
	Limiter Limiter
	// Plans, when set, names the policy in RateLimit-Policy; nil writes
	// "default" without a window.
	Plans Plans
	// Key returns the request's API key; "" answers 401. Default: the
	// X-API-Key header.
	Key func(*http.Request) string
	// Endpoint returns the name whose weight is the request's cost.
	// Default: RoutePath.
	Endpoint func(*http.Request) string
	// Logger receives unexpected errors. Default slog.Default().
	Logger *slog.Logger
}

// KeyHeader is the default key source.
const KeyHeader = "X-API-Key"

// Middleware returns a wrapper that admits a request when the limiter
// allows its cost and answers 429 otherwise.
func Middleware(cfg Config) (func(http.Handler) http.Handler, error) {
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("httplimit: config Limiter must not be nil")
	}
	if cfg.Key == nil {
		cfg.Key = func(r *http.Request) string { return r.Header.Get(KeyHeader) }
	}
	if cfg.Endpoint == nil {
		cfg.Endpoint = RoutePath
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := cfg.Key(r)
			if key == "" {
				WriteError(w, http.StatusUnauthorized, "key", "the request carries no API key")
				return
			}
			cost, err := cfg.Limiter.EndpointCost(cfg.Endpoint(r))
			if err == nil {
				var d region.Decision
				d, err = cfg.Limiter.Allow(r.Context(), key, cost)
				if err == nil {
					var p Policy
					if cfg.Plans != nil {
						p.Name, p.Plan, _ = cfg.Plans.Resolve(key)
					}
					WriteHeaders(w.Header(), p, d)
					if !d.Allowed {
						WriteError(w, http.StatusTooManyRequests, "key", "rate limit exceeded")
						return
					}
					next.ServeHTTP(w, r)
					return
				}
			}
			status, field := Classify(err)
			if status == http.StatusInternalServerError {
				cfg.Logger.Error("rate limit check failed", "err", err)
				WriteError(w, status, "", "rate limit check failed")
				return
			}
			WriteError(w, status, field, err.Error())
		})
	}, nil
}

// RoutePath is the default endpoint name: the path of the ServeMux pattern
// that matched the request, without its method ("GET /items/{id}" gives
// "/items/{id}"), else the request's URL path. Wrap handlers with the
// middleware after registering them on a ServeMux so that the pattern is
// known.
func RoutePath(r *http.Request) string {
	if r.Pattern == "" {
		return r.URL.Path
	}
	if i := strings.IndexByte(r.Pattern, ' '); i >= 0 {
		return strings.TrimLeft(r.Pattern[i+1:], " \t")
	}
	return r.Pattern
}
