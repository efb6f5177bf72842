package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// A request retried with the same Idempotency-Key is charged once and
// answered as the first was; a bad key is a 400; without the header every
// request is charged.
func TestMiddlewareIdempotencyKey(t *testing.T) {
	lim, err := region.New(memstore.New(nil), region.StaticPlans{Default: region.Plan{Rate: 0.001, Capacity: 2}}, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.Middleware(httplimit.Config{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	send := func(idem string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/orders", nil)
		r.Header.Set("X-API-Key", "acct")
		if idem != "" {
			r.Header.Set(httplimit.IdempotencyHeader, idem)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 3 {
		if w := send("order-1"); w.Code != http.StatusTeapot || w.Header().Get("X-RateLimit-Remaining") != "1" {
			t.Fatalf("try %d: %d remaining %s, want served with 1 left (charged once)", i, w.Code, w.Header().Get("X-RateLimit-Remaining"))
		}
	}
	if w := send(strings.Repeat("x", store.MaxRequestIDLen+1)); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "request_id") {
		t.Fatalf("a key too long: %d %s", w.Code, w.Body)
	}
	if w := send(""); w.Code != http.StatusTeapot {
		t.Fatalf("without the header: %d", w.Code)
	}
	if w := send(""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("without the header, bucket empty: %d", w.Code)
	}
	if w := send("order-1"); w.Code != http.StatusTeapot {
		t.Fatalf("the first decision of order-1 is replayed even with the bucket empty: %d", w.Code)
	}
}
