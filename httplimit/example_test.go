package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/region"
)

// Wrap each route after registering it, so that its pattern names the
// endpoint whose weight is the cost.
func ExampleMiddleware() {
	cfg := region.DefaultConfig()
	cfg.Costs = region.StaticCosts{"/search": 5}
	lim, _ := region.New(region.NewMemoryStore(nil), region.StaticPlans{Default: region.Plan{Rate: 1, Capacity: 10}}, cfg)
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
