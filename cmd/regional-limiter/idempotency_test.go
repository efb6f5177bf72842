package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/region"
)

// --idempotency-horizon reaches the limiter (default 24h, at least 1ms),
// and the daemon charges a request_id once and takes refunds and charges
// behind the check token.
func TestIdempotencyHorizonAndRoutes(t *testing.T) {
	if o, err := parseOptions(nil, io.Discard); err != nil || o.Limiter.IdempotencyHorizon != 24*time.Hour {
		t.Fatalf("default: %v %v", o.Limiter.IdempotencyHorizon, err)
	}
	if _, err := parseOptions([]string{"--idempotency-horizon", "0s"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--idempotency-horizon") {
		t.Fatalf("--idempotency-horizon 0s: %v", err)
	}
	o := testOptions(t, "", "", t.TempDir())
	o.Limiter.IdempotencyHorizon = time.Hour
	o.CheckToken = checkOld
	var lim *region.Limiter
	d := startDaemon(t, o, fx.Populate(&lim))
	if h := lim.IdempotencyHorizon(); h != time.Hour {
		t.Fatalf("limiter horizon %v, want 1h", h)
	}
	post := func(path, body, tok string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", d.base+path, strings.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	body := `{"key":"acct_1","cost":2,"request_id":"ord-1"}`
	for _, path := range []string{"/v1/allow", "/v1/refund", "/v1/charge"} {
		if code, m := post(path, body, ""); code != http.StatusUnauthorized {
			t.Fatalf("%s without the check token: %d %v", path, code, m)
		}
	}
	for i := range 2 {
		code, m := post("/v1/allow", body, checkOld)
		if code != 200 || m["allowed"] != true || (m["replayed"] == true) != (i == 1) {
			t.Fatalf("check %d: %d %v", i, code, m)
		}
	}
	if code, m := post("/v1/refund", body, checkOld); code != 200 || m["refunded"] != float64(2) {
		t.Fatalf("refund: %d %v", code, m)
	}
	if code, m := post("/v1/refund", `{"key":"acct_1","cost":1,"request_id":"ord-1"}`, checkOld); code != http.StatusConflict || m["field"] != "request_id" {
		t.Fatalf("second refund with another cost: %d %v", code, m)
	}
	if code, m := post("/v1/charge", `{"key":"acct_1","cost":5,"request_id":"ord-1-tokens"}`, checkOld); code != 200 || m["charged"] != float64(5) {
		t.Fatalf("charge: %d %v", code, m)
	}
}
