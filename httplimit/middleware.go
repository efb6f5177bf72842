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

// Plans names a key's plan for the RateLimit-Policy field, for a Limiter
// whose decisions do not carry their plan (region.Decision.Plan is zero);
// the catalog package's Catalog is one.
type Plans interface {
	Resolve(key string) (string, region.Plan, error)
}

// Config configures Middleware. Only Limiter is required.
type Config struct {
	// Limiter decides.
	Limiter Limiter
	// Plans, when set, names the policy in RateLimit-Policy when a
	// decision does not carry its plan (a region.Limiter's decisions do:
	// Plans is then not asked). Without either the policy is "default"
	// without a window.
	Plans Plans
	// Key returns the request's limit key; "" answers 401. Make it the
	// account the request acts for, as the service's authentication
	// resolved it (see KeyFromContext), not a secret: the key is stored in
	// the limiter's store, in usage reports and the billing ledger, and
	// shown by the control plane. Default: the X-API-Key header as sent,
	// for services whose API keys are not secrets.
	Key func(*http.Request) string
	// Endpoint returns the name whose weight is the request's cost.
	// Default: RoutePath.
	Endpoint func(*http.Request) string
	// Logger receives unexpected errors. Default slog.Default().
	Logger *slog.Logger
}

// KeyHeader is the default key source.
const KeyHeader = "X-API-Key"

// KeyFromContext returns a Config.Key that reads the limit key from the
// request's context under ctxKey, where the service's authentication
// middleware, run before this one, stored the caller's account id as a
// string. A request without one answers 401.
func KeyFromContext(ctxKey any) func(*http.Request) string {
	return func(r *http.Request) string {
		s, _ := r.Context().Value(ctxKey).(string)
		return s
	}
}

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
				WriteError(w, http.StatusUnauthorized, "key", "the request carries no rate-limit key (no account)")
				return
			}
			cost, err := cfg.Limiter.EndpointCost(cfg.Endpoint(r))
			if err == nil {
				var d region.Decision
				d, err = cfg.Limiter.Allow(r.Context(), key, cost)
				if err == nil {
					WriteHeaders(w.Header(), policy(cfg.Plans, key, d), d)
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
				cfg.Logger.Error("rate limit check failed", "err", RedactKey(err, key))
				cfg.Logger.Debug("rate limit check failed", "key", key, "err", err)
				WriteError(w, status, "", "rate limit check failed")
				return
			}
			WriteError(w, status, field, err.Error())
		})
	}, nil
}

// policy is the plan d was taken against: the one it carries, else the
// one plans resolves for key.
func policy(plans Plans, key string, d region.Decision) Policy {
	if p := d.Plan(); p.Rate > 0 {
		return Policy{Name: p.Name, Plan: p}
	}
	var p Policy
	if plans != nil {
		p.Name, p.Plan, _ = plans.Resolve(key)
	}
	return p
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
