package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// Wrap each route after registering it, so that its pattern names the
// endpoint whose weight is the cost.
func ExampleMiddleware() {
	cfg := region.DefaultConfig()
	cfg.Costs = region.StaticCosts{"/search": 5}
	lim, _ := region.New(memstore.New(nil), region.StaticPlans{Default: region.Plan{Rate: 1, Capacity: 10}}, cfg)
	limit, _ := httplimit.Middleware(httplimit.Config{Limiter: lim})

	mux := http.NewServeMux()
	mux.Handle("GET /search", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "results")
	})))

	for range 3 {
		r := httptest.NewRequest("GET", "/search", nil)
		r.Header.Set("X-API-Key", "acct_1")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("%d remaining=%s retry-after=%q\n", w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining=5 retry-after=""
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="5"
}

// accountKey is the context key under which the service's authentication
// stores the caller's account id.
type accountKey struct{}

// Limit by account, not by API key: the service's authentication
// middleware resolves the API key to an account id (one account may hold
// several keys, and a key may be rotated) and stores it in the request's
// context, and the limiter reads it from there. The secret key never
// reaches the limiter's store, usage reports or logs.
func ExampleKeyFromContext() {
	lim, _ := region.New(memstore.New(nil), region.StaticPlans{Default: region.Plan{Rate: 1, Capacity: 2}}, region.DefaultConfig())
	limit, _ := httplimit.Middleware(httplimit.Config{Limiter: lim, Key: httplimit.KeyFromContext(accountKey{})})

	accounts := map[string]string{"sk_live_1": "acct_42", "sk_live_2": "acct_42", "sk_live_3": "acct_7"}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			acct, ok := accounts[r.Header.Get("Authorization")]
			if !ok {
				http.Error(w, "unknown API key", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, acct)))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /search", authenticate(limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))

	// Two keys of acct_42 share its limit of 2; acct_7 has its own.
	for _, apiKey := range []string{"sk_live_1", "sk_live_2", "sk_live_1", "sk_live_3", "sk_nope"} {
		r := httptest.NewRequest("GET", "/search", nil)
		r.Header.Set("Authorization", apiKey)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("%s: %d remaining=%s\n", apiKey, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// sk_live_1: 200 remaining=1
	// sk_live_2: 200 remaining=0
	// sk_live_1: 429 remaining=0
	// sk_live_3: 200 remaining=1
	// sk_nope: 401 remaining=
}
