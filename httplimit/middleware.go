package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quotaplatform/quota/region"
)

// Limiter is what the middleware needs of a region.Limiter.
type Limiter interface {
	Allow(ctx context.Context, key string, cost int64) (region.Decision, error)
	// EndpointCost returns endpoint's weight.
	EndpointCost(endpoint string) (int64, error)
}

// Slots is what the middleware's concurrency mode needs of a
// region.Limiter (Config.Concurrency).
type Slots interface {
	Acquire(ctx context.Context, key, leaseID string) (region.Slot, error)
	Release(ctx context.Context, key, leaseID string) (bool, error)
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
	// Concurrency switches the middleware to concurrency mode: instead of
	// spending the request's cost, it takes a concurrency slot of the key's
	// plan (region.Plan.Concurrency) before the handler, answers 429 with
	// Retry-After when none is free, and releases the slot after the
	// handler returns, also when it panics. Limiter must then implement
	// Slots (a *region.Limiter does). Endpoint is not used. Default false.
	Concurrency bool
	// Checks, when set, is told how long each decision took in the
	// middleware (key, cost, decision and response fields; not the
	// handler after it) and on which path it was decided, as the daemon's
	// check API reports its checks (limitmetrics.Checks). Not used in
	// concurrency mode. Default nil.
	Checks CheckObserver
	// Logger receives unexpected errors. Default slog.Default().
	Logger *slog.Logger
}

// CheckObserver times decisions by their path; limitmetrics.Checks is one.
type CheckObserver interface {
	ObserveCheck(path region.Path, d time.Duration)
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
	if cfg.Concurrency {
		slots, ok := cfg.Limiter.(Slots)
		if !ok {
			return nil, fmt.Errorf("httplimit: config Concurrency: Limiter %T holds no slots (it needs Acquire and Release)", cfg.Limiter)
		}
		return concurrency(cfg, slots), nil
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var start time.Time
			if cfg.Checks != nil {
				start = time.Now()
			}
			key, ok := requestKey(cfg, w, r)
			if !ok {
				return
			}
			cost, err := cfg.Limiter.EndpointCost(cfg.Endpoint(r))
			if err == nil {
				var d region.Decision
				d, err = allow(cfg.Limiter, r, key, cost)
				if err == nil {
					WriteHeaders(w.Header(), policy(cfg.Plans, key, d), d)
					if cfg.Checks != nil {
						cfg.Checks.ObserveCheck(d.Path, time.Since(start))
					}
					if !d.Allowed {
						WriteError(w, http.StatusTooManyRequests, "key", "rate limit exceeded")
						return
					}
					next.ServeHTTP(w, r)
					return
				}
			}
			writeLimiterError(w, cfg.Logger, err, key)
		})
	}, nil
}

// concurrency is the middleware of concurrency mode.
func concurrency(cfg Config, slots Slots) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := requestKey(cfg, w, r)
			if !ok {
				return
			}
			s, err := slots.Acquire(r.Context(), key, "")
			if err != nil {
				writeLimiterError(w, cfg.Logger, err, key)
				return
			}
			if !s.Allowed {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(s.RetryAfter), 10))
				WriteError(w, http.StatusTooManyRequests, "key", "concurrency limit reached: "+strconv.Itoa(s.Held)+" of "+strconv.Itoa(s.Limit)+" requests in flight")
				return
			}
			defer func() {
				// Also on panic (the panic goes on after), and with the
				// request's context already cancelled.
				ctx := context.WithoutCancel(r.Context())
				if _, err := slots.Release(ctx, key, s.ID); err != nil {
					cfg.Logger.Warn("concurrency slot not released; it frees itself when it expires", "err", RedactKey(err, key))
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// writeLimiterError answers a limiter error in a request of key.
func writeLimiterError(w http.ResponseWriter, log *slog.Logger, err error, key string) {
	status, field := Classify(err)
	if status == http.StatusInternalServerError {
		log.Error("rate limit check failed", "err", RedactKey(err, key))
		log.Debug("rate limit check failed", "key", key, "err", err)
		WriteError(w, status, "", "rate limit check failed")
		return
	}
	WriteError(w, status, field, err.Error())
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

// requestKey is the request's rate-limit key; a request without one is
// answered 401 and ok is false.
func requestKey(cfg Config, w http.ResponseWriter, r *http.Request) (key string, ok bool) {
	key = cfg.Key(r)
	if key == "" {
		WriteError(w, http.StatusUnauthorized, "key", "the request carries no rate-limit key (no account)")
		return "", false
	}
	return key, true
}
