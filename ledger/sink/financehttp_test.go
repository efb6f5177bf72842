package sink_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/sink"
)

// GET /v1/usage/audit and /v1/usage/statement answer a billing token
// only: none is 401, a wrong one 403, a prefix-scoped token reads its own
// keys' trails but no statement, and bad parameters are 400 naming them.
func TestFinanceRoutesNeedABillingToken(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 100, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	fake := startFakeStripe(t)
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), sink.StripeConfig{Meter: testMeter}, nov, dec, dec.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	tokens, err := billing.ParseTokens("finance-token-0123456789abcdef,prefix:acct_b=scoped-token-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	access, err := billing.NewAccess(tokens)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/usage/audit", &sink.AuditHandler{DB: e.pool, Access: access})
	mux.Handle("GET /v1/usage/statement", &sink.StatementHandler{DB: e.pool, Exporter: e.ex, Access: access,
		Now: func() time.Time { return dec.Add(2 * time.Hour) }})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, string(b)
	}
	const full, scoped = "finance-token-0123456789abcdef", "scoped-token-0123456789abcdef"
	for _, tt := range []struct {
		path, token string
		status      int
		field       string
	}{
		{"/v1/usage/audit?key=acct_a&period=2026-11", "", 401, ""},
		{"/v1/usage/audit?key=acct_a&period=2026-11", "wrong-token-0123456789abcdef", 403, ""},
		{"/v1/usage/audit?key=acct_a&period=2026-11", scoped, 403, "key"},
		{"/v1/usage/audit?period=2026-11", full, 400, "key"},
		{"/v1/usage/audit?key=acct_a&period=Nov", full, 400, "period"},
		{"/v1/usage/statement?customer=cus_A&period=2026-11", scoped, 400, "customer"},
		{"/v1/usage/statement?customer=acct_a&period=2026-11", full, 400, "customer"},
		{"/v1/usage/audit?key=acct_a&period=2026-11", full, 200, ""},
		{"/v1/usage/statement?customer=cus_A&period=2026-11", full, 200, ""},
	} {
		status, body := get(tt.path, tt.token)
		if status != tt.status || (tt.field != "" && !strings.Contains(body, `"field":"`+tt.field+`"`)) {
			t.Errorf("%s: %d %s; want %d naming %q", tt.path, status, body, tt.status, tt.field)
		}
	}
	_, body := get("/v1/usage/audit?key=acct_a&period=2026-11", full)
	var trail []sink.AuditEntry
	if err := json.Unmarshal([]byte(body), &trail); err != nil || len(trail) != 2 || trail[1].Action != "answer" || trail[1].Acked != 100 {
		t.Errorf("audit: %s (%v); want the request and its answer", body, err)
	}
	_, body = get("/v1/usage/statement?customer=cus_A&period=2026-11", full)
	var st sink.Statement
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Total.Billed != 100 || len(st.Lines) != 1 {
		t.Errorf("statement: %s (%v); want acct_a's 100", body, err)
	}
}
