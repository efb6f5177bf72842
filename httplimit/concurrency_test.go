package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// TestConcurrencyMode: the middleware takes a slot before the handler and
// frees it after, also when the handler panics; past the plan's
// concurrency it answers 429.
func TestConcurrencyMode(t *testing.T) {
	plans := region.StaticPlans{Default: region.Plan{Rate: 1, Capacity: 1, Concurrency: 1}}
	lim, err := region.New(memstore.New(nil), plans, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.Middleware(httplimit.Config{Limiter: lim, Concurrency: true})
	if err != nil {
		t.Fatal(err)
	}
	entered, leave := make(chan struct{}), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			close(entered)
			<-leave
		case "/panic":
			panic("handler failed")
		}
		w.WriteHeader(http.StatusTeapot)
	}))
	serve := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("X-API-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve("/slow") }()
	<-entered
	if w := serve("/fast"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("second request while one is in flight: %d %s", w.Code, w.Body)
	}
	close(leave)
	if w := <-done; w.Code != http.StatusTeapot {
		t.Fatalf("the slow request: %d", w.Code)
	}
	if w := serve("/fast"); w.Code != http.StatusTeapot {
		t.Fatalf("after the slow request: %d %s", w.Code, w.Body)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on past the middleware")
			}
		}()
		serve("/panic")
	}()
	if w := serve("/fast"); w.Code != http.StatusTeapot {
		t.Fatalf("after a panicking handler: %d %s: its slot was not released", w.Code, w.Body)
	}

	// A limiter without slots cannot run in concurrency mode.
	if _, err := httplimit.Middleware(httplimit.Config{Limiter: rateOnly{lim}, Concurrency: true}); err == nil {
		t.Fatal("concurrency mode accepted a limiter without slots")
	}
}

// rateOnly hides a Limiter's slots.
type rateOnly struct{ httplimit.Limiter }
