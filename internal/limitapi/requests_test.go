package limitapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/region/store"
)

type answer struct {
	Allowed   bool   `json:"allowed"`
	Remaining int64  `json:"remaining"`
	Replayed  bool   `json:"replayed"`
	Cost      int64  `json:"cost"`
	Charged   int64  `json:"charged"`
	Refunded  int64  `json:"refunded"`
	Error     string `json:"error"`
	Field     string `json:"field"`
}

func decodeAnswer(t *testing.T, body []byte) answer {
	t.Helper()
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return a
}

// A check with a request_id is charged once: the retry answers the first
// decision, flagged replayed, and leaves the bucket alone; in a batch too.
func TestAllowRequestID(t *testing.T) {
	h, _ := newAPI(t, true) // default plan: capacity 3, rate 1/s
	first := do(h, "POST", "/v1/allow", `{"key":"k","cost":2,"request_id":"order-1"}`)
	a := decodeAnswer(t, first.Body.Bytes())
	if first.Code != 200 || !a.Allowed || a.Replayed || a.Remaining != 1 {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	for range 3 {
		w := do(h, "POST", "/v1/allow", `{"key":"k","cost":2,"request_id":"order-1"}`)
		if a := decodeAnswer(t, w.Body.Bytes()); w.Code != 200 || !a.Allowed || !a.Replayed || a.Remaining != 1 {
			t.Fatalf("retry: %d %s, want the first decision replayed", w.Code, w.Body)
		}
	}
	// Another id is charged: 1 token left, cost 2: rejected, and that
	// rejection is replayed too.
	for i := range 2 {
		w := do(h, "POST", "/v1/allow", `{"key":"k","cost":2,"request_id":"order-2"}`)
		if a := decodeAnswer(t, w.Body.Bytes()); a.Allowed || a.Replayed != (i == 1) {
			t.Fatalf("order-2 try %d: %s", i, w.Body)
		}
	}
	w := do(h, "POST", "/v1/allow/batch", `{"checks":[{"key":"b","cost":1,"request_id":"x"},{"key":"b","cost":1,"request_id":"x"},{"key":"b","cost":1}]}`)
	var br struct{ Results []answer }
	if err := json.Unmarshal(w.Body.Bytes(), &br); err != nil || len(br.Results) != 3 {
		t.Fatalf("batch: %s %v", w.Body, err)
	}
	if r := br.Results; !r[0].Allowed || r[0].Replayed || !r[1].Replayed || r[1].Remaining != 2 || r[2].Replayed || r[2].Remaining != 1 {
		t.Fatalf("batch results %+v", br.Results)
	}
}

// Refunds and charges over HTTP: bounded by the charge, once per
// request_id, conflicts and unknown ids answered with the field, and a
// charge into debt rejects the next checks.
func TestRefundAndCharge(t *testing.T) {
	h, _ := newAPI(t, true) // capacity 3
	if w := do(h, "POST", "/v1/allow", `{"key":"k","cost":3,"request_id":"r1"}`); !decodeAnswer(t, w.Body.Bytes()).Allowed {
		t.Fatalf("check: %s", w.Body)
	}
	cases := []struct {
		path, body string
		status     int
		field      string
		replayed   bool
		remaining  int64
	}{
		{"/v1/refund", `{"key":"k","cost":4,"request_id":"r1"}`, 400, "cost", false, 0},
		{"/v1/refund", `{"key":"k","cost":1,"request_id":"nope"}`, 404, "request_id", false, 0},
		{"/v1/refund", `{"key":"k","cost":2,"request_id":"r1"}`, 200, "", false, 2},
		{"/v1/refund", `{"key":"k","cost":2,"request_id":"r1"}`, 200, "", true, 2},
		{"/v1/refund", `{"key":"k","cost":1,"request_id":"r1"}`, 409, "request_id", false, 0},
		{"/v1/charge", `{"key":"k","cost":5,"request_id":"r2"}`, 200, "", false, -3},
		{"/v1/charge", `{"key":"k","cost":5,"request_id":"r2"}`, 200, "", true, -3},
		{"/v1/charge", `{"key":"k","cost":6,"request_id":"r2"}`, 409, "request_id", false, 0},
	}
	for i, c := range cases {
		w := do(h, "POST", c.path, c.body)
		a := decodeAnswer(t, w.Body.Bytes())
		if w.Code != c.status || a.Field != c.field {
			t.Fatalf("case %d %s %s: %d %s, want %d naming %q", i, c.path, c.body, w.Code, w.Body, c.status, c.field)
		}
		// A real clock refills 1/s meanwhile: a little more may be left.
		if w.Code == 200 && (a.Replayed != c.replayed || a.Remaining < c.remaining || a.Remaining > c.remaining+1) {
			t.Fatalf("case %d: %s, want replayed %v, remaining %d", i, w.Body, c.replayed, c.remaining)
		}
	}
	if w := do(h, "POST", "/v1/allow", `{"key":"k","cost":1}`); decodeAnswer(t, w.Body.Bytes()).Allowed {
		t.Fatalf("a check after a charge into debt was allowed: %s", w.Body)
	}
}

// Bad input answers 400 naming the field, on every route that takes a
// request_id.
func TestRequestIDBadInput(t *testing.T) {
	h, _ := newAPI(t, true)
	long := strings.Repeat("r", store.MaxRequestIDLen+1)
	for _, c := range []struct{ path, body, field string }{
		{"/v1/allow", `{"key":"k","request_id":"` + long + `"}`, "request_id"},
		{"/v1/allow", `{"key":"k","request_id":""}`, "request_id"},
		{"/v1/allow", `{"key":"k","request_id":"a b"}`, "request_id"},
		{"/v1/allow", `{"key":"k","request_id":7}`, "request_id"},
		{"/v1/allow", `{"key":"","request_id":"r"}`, "key"},
		{"/v1/allow", `{"key":"k","cost":-1,"request_id":"r"}`, "cost"},
		{"/v1/allow/batch", `{"checks":[{"key":"k","request_id":"` + long + `"}]}`, "checks[0].request_id"},
		{"/v1/refund", `{"key":"k","cost":-1,"request_id":"r"}`, "cost"},
		{"/v1/refund", `{"key":"k","request_id":"r"}`, "cost"},
		{"/v1/refund", `{"key":"","cost":1,"request_id":"r"}`, "key"},
		{"/v1/refund", `{"key":"k","cost":1}`, "request_id"},
		{"/v1/refund", `{"key":"k","cost":1,"request_id":"` + long + `"}`, "request_id"},
		{"/v1/charge", `{"key":"k","cost":0,"request_id":"r"}`, "cost"},
		{"/v1/charge", `{"key":"k","cost":1,"request_id":""}`, "request_id"},
		{"/v1/charge", `{"key":"k","cost":1,"request_id":"r","extra":1}`, "extra"},
	} {
		w := do(h, "POST", c.path, c.body)
		if c.path == "/v1/allow/batch" {
			var br struct {
				Results []struct {
					Field  string `json:"field"`
					Status int    `json:"status"`
				}
			}
			if err := json.Unmarshal(w.Body.Bytes(), &br); err != nil || len(br.Results) != 1 || br.Results[0].Status != 400 || br.Results[0].Field != c.field {
				t.Errorf("%s %s: %s, want a 400 naming %s", c.path, c.body, w.Body, c.field)
			}
			continue
		}
		if a := decodeAnswer(t, w.Body.Bytes()); w.Code != http.StatusBadRequest || a.Field != c.field {
			t.Errorf("%s %s: %d %s, want 400 naming %s", c.path, c.body, w.Code, w.Body, c.field)
		}
	}
}

// With a check token configured, refunds and charges without it are
// refused (401), with it served.
func TestRefundNeedsCheckToken(t *testing.T) {
	h, _, _ := newAPIWithConfig(t, true, nil, withTokens)
	for _, path := range []string{"/v1/allow", "/v1/charge", "/v1/refund"} {
		body := `{"key":"k","cost":1,"request_id":"r9"}`
		if w := do(h, "POST", path, body); w.Code != http.StatusUnauthorized {
			t.Fatalf("%s without a token: %d %s", path, w.Code, w.Body)
		}
		if w := do(h, "POST", path, body, "Authorization", "Bearer "+checkNew); w.Code != 200 {
			t.Fatalf("%s with the check token: %d %s", path, w.Code, w.Body)
		}
	}
}

// A limiter without request ids answers 501 naming request_id.
func TestRequestIDUnsupported(t *testing.T) {
	h, _ := newAPIWith(t, true, func(l limitapi.Limiter) limitapi.Limiter { return plainLimiter{l} })
	for _, c := range []struct{ path, body string }{
		{"/v1/allow", `{"key":"k","request_id":"r"}`},
		{"/v1/refund", `{"key":"k","cost":1,"request_id":"r"}`},
	} {
		if w := do(h, "POST", c.path, c.body); w.Code != http.StatusNotImplemented || decodeAnswer(t, w.Body.Bytes()).Field != "request_id" {
			t.Errorf("%s: %d %s, want 501", c.path, w.Code, w.Body)
		}
	}
}

// plainLimiter hides every method but limitapi.Limiter's.
type plainLimiter struct{ limitapi.Limiter }
