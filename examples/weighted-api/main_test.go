package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
)

// A stopped service leaves no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startTest starts the service on embedded defaults (in-process store,
// embedded NATS) with extra flags, on a free port and a temporary data dir.
func startTest(t *testing.T, args ...string) *service {
	t.Helper()
	cfg, err := parseFlags(append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := startService(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := s.stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

func call(t *testing.T, s *service, method, path, apiKey, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.addr.String()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// TestLimitAndLedger: on embedded defaults, a key's burst of 20 is spent by
// three reports (cost 5 each) and five quotes (cost 1), and the next quote
// is refused with 429 and Retry-After; another key is unaffected. The usage
// reaches the ledger stream while the service runs: reports of the key with
// spent 20.
func TestLimitAndLedger(t *testing.T) {
	// A refill of one unit per 100 s: nothing refills during the test.
	s := startTest(t, "--default-rate", "0.01", "--default-capacity", "20", "--report-interval", "100ms")
	if resp, body := call(t, s, "GET", "/readyz", "", ""); resp.StatusCode != 200 {
		t.Fatalf("/readyz: %d %s", resp.StatusCode, body)
	}
	const key = "acct_weighted"
	for i := range 3 {
		resp, body := call(t, s, "POST", "/v1/reports", key, `{"symbols":["ACME","GLOBEX"]}`)
		if resp.StatusCode != 200 || !strings.Contains(body, `"symbol":"GLOBEX"`) {
			t.Fatalf("report %d: %d %s", i, resp.StatusCode, body)
		}
		if got, want := resp.Header.Get("X-RateLimit-Remaining"), fmt.Sprint(20-5*(i+1)); got != want {
			t.Fatalf("report %d: remaining %s, want %s: a report should cost 5", i, got, want)
		}
	}
	for i := range 5 {
		if resp, body := call(t, s, "GET", "/v1/quotes/ACME", key, ""); resp.StatusCode != 200 {
			t.Fatalf("quote %d: %d %s", i, resp.StatusCode, body)
		}
	}
	resp, body := call(t, s, "GET", "/v1/quotes/ACME", key, "")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("quote past the limit: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if resp, body := call(t, s, "POST", "/v1/reports", key, `{"symbols":["ACME"]}`); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("report past the limit: %d %s", resp.StatusCode, body)
	}
	if resp, _ := call(t, s, "GET", "/v1/quotes/ACME", "acct_other", ""); resp.StatusCode != 200 {
		t.Fatalf("another key: %d", resp.StatusCode)
	}
	// Bad input is the API's 400, not charged; no key is 401.
	if resp, body := call(t, s, "GET", "/v1/quotes/acme", "acct_bad", ""); resp.StatusCode != 400 || !strings.Contains(body, `"field":"symbol"`) {
		t.Fatalf("bad symbol: %d %s", resp.StatusCode, body)
	}
	if resp, _ := call(t, s, "GET", "/v1/quotes/ACME", "", ""); resp.StatusCode != 401 {
		t.Fatalf("no key: %d, want 401", resp.StatusCode)
	}

	js := s.p.JetStream()
	testserver.WaitFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		spent, rejected, err := ledgerUsage(js, key)
		if err != nil {
			return err
		}
		if spent != 20 || rejected != 6 {
			return fmt.Errorf("ledger stream: %s spent %d rejected %d, want 20 and 6 (1 + 5)", key, spent, rejected)
		}
		return nil
	})
}

// ledgerUsage reads the whole usage stream and returns key's latest spent
// and rejected: reports are cumulative per process and window, and this
// service is one process in one window.
func ledgerUsage(js jetstream.JetStream, key string) (spent, rejected int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		return 0, 0, err // the stream does not exist before the first report
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	// By sequence, not with a consumer: the work-queue stream takes no
	// consumer beside the reconciler's, and this read must not ack.
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		reps, err := ledger.DecodeMessage(m.Header.Get(ledger.HeaderEncoding), m.Data)
		if err != nil {
			return 0, 0, err
		}
		for _, r := range reps {
			if r.Key == key {
				spent, rejected = max(spent, r.Spent), max(rejected, r.Rejected)
			}
		}
	}
	return spent, rejected, nil
}

// TestReportInput: a report's body is checked, each error naming its field.
func TestReportInput(t *testing.T) {
	s := startTest(t)
	for _, tc := range []struct{ body, field string }{
		{`{"symbols":[]}`, "symbols"},
		{`{"symbols":["ACME","x1"]}`, "symbols[1]"},
		{`{"symbol":"ACME"}`, "body"},
		{`not json`, "body"},
	} {
		resp, body := call(t, s, "POST", "/v1/reports", "acct_input", tc.body)
		var e struct{ Field string }
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != 400 || e.Field != tc.field {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.body, resp.StatusCode, body, tc.field)
		}
	}
}

// TestFlags: the daemon's flag names, and errors that name them.
func TestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--region", "eu", "--nats", "nats://127.0.0.1:4222", "--regions", "eu,us",
		"--region-weights", "eu=2,us=1", "--redis", "redis://127.0.0.1:6379/0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.participant
	if o.Region != "eu" || len(o.Regions) != 2 || o.RegionWeights["eu"] != 2 || o.DefaultPlan.Rate != 0 {
		t.Fatalf("options %+v: want region eu of eu,us, weights, and no default plan with --redis", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats-user", "u"}, "--nats-user and --nats-creds need --nats"},
		{[]string{"--regions", "eu,,us"}, "--regions: "},
		{[]string{"--region-weights", "eu=x"}, "--region-weights: "},
		{[]string{"--memberlist-key", "short"}, "--memberlist-key: "},
	} {
		if _, err := parseFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestOperatorRoutes: the participant's read-only operator routes are on
// the service's mux behind --read-token: no token is 401, another token
// 403, the token reads a key's plan and the region's shares; a service
// without --read-token refuses every read.
func TestOperatorRoutes(t *testing.T) {
	const token = "weighted-api-read-token"
	s := startTest(t, "--read-token", token)
	get := func(t *testing.T, s *service, path, tok string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+s.addr.String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/v1/keys/acct_ops", "/v1/limits/default", "/v1/costs/quote", "/debug/shares?key=acct_ops", "/v1/hotkeys"} {
		if code, body := get(t, s, path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d %s, want 401", path, code, body)
		}
		if code, body := get(t, s, path, "not-the-read-token"); code != http.StatusForbidden {
			t.Errorf("%s with another token: %d %s, want 403", path, code, body)
		}
	}
	var view struct {
		Plan     string             `json:"plan"`
		Capacity float64            `json:"capacity"`
		Shares   map[string]float64 `json:"shares"`
	}
	code, body := get(t, s, "/v1/keys/acct_ops", token)
	if err := json.Unmarshal([]byte(body), &view); code != 200 || err != nil || view.Capacity != 20 {
		t.Fatalf("GET /v1/keys/acct_ops: %d %s (%v), want the built-in default plan of capacity 20", code, body, err)
	}
	var shares struct {
		Shares map[string]float64 `json:"shares"`
	}
	code, body = get(t, s, "/debug/shares?key=acct_ops", token)
	if err := json.Unmarshal([]byte(body), &shares); code != 200 || err != nil || shares.Shares["local"] != 1 {
		t.Fatalf("GET /debug/shares: %d %s (%v), want region local holding share 1", code, body, err)
	}
	if code, body := get(t, s, "/v1/hotkeys?k=0", token); code != 400 || !strings.Contains(body, `"field":"k"`) {
		t.Fatalf("GET /v1/hotkeys?k=0: %d %s, want 400 naming k", code, body)
	}
	// Writes stay with the control plane: no write route is mounted.
	req, _ := http.NewRequest("PUT", "http://"+s.addr.String()+"/v1/limits/default", strings.NewReader(`{"rate":1,"capacity":1}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusNotFound {
		t.Fatalf("PUT /v1/limits/default: %d, want 405 or 404", resp.StatusCode)
	}

	closed := startTest(t)
	if code, body := get(t, closed, "/v1/keys/acct_ops", token); code != http.StatusForbidden {
		t.Fatalf("without --read-token: %d %s, want 403", code, body)
	}
}

// TestBadInputSpendsNothing: a malformed report or quote is refused with
// a 400 naming its field before the limiter sees it, so the caller's
// quota is untouched: the next good report still finds the full burst.
func TestBadInputSpendsNothing(t *testing.T) {
	s := startTest(t, "--default-rate", "0.01", "--default-capacity", "20")
	const key = "acct_careless"
	tests := []struct {
		name, method, path, body, field string
	}{
		{"not JSON", "POST", "/v1/reports", `symbols=ACME`, "body"},
		{"unknown field", "POST", "/v1/reports", `{"symbols":["ACME"],"extra":1}`, "body"},
		{"trailing data", "POST", "/v1/reports", `{"symbols":["ACME"]} {}`, "body"},
		{"too large", "POST", "/v1/reports", `{"symbols":["` + strings.Repeat("A", 2<<10) + `"]}`, "body"},
		{"no symbols", "POST", "/v1/reports", `{"symbols":[]}`, "symbols"},
		{"too many symbols", "POST", "/v1/reports", `{"symbols":[` + strings.Repeat(`"A",`, maxReportSymbols) + `"A"]}`, "symbols"},
		{"bad symbol", "POST", "/v1/reports", `{"symbols":["ACME","globex"]}`, "symbols[1]"},
		{"bad quote symbol", "GET", "/v1/quotes/acme", "", "symbol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := call(t, s, tt.method, tt.path, key, tt.body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, fmt.Sprintf(`"field":%q`, tt.field)) {
				t.Fatalf("%d %s, want 400 naming %s", resp.StatusCode, body, tt.field)
			}
		})
	}
	resp, body := call(t, s, "POST", "/v1/reports", key, `{"symbols":["ACME"]}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "15" {
		t.Fatalf("good report after the bad ones: %d remaining %q %s, want 200 and 15 (nothing spent before)",
			resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), body)
	}
}

// TestDefaultPortIsItsOwn: the example's default port is none of those the
// platform's processes take by default, so it runs beside them.
func TestDefaultPortIsItsOwn(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	taken := map[string]string{":8080": "regional-limiter --listen", ":8081": "regional-limiter --grpc-listen (docs/migrating.md)",
		":8082": "reconciler serve --listen"}
	if taken[cfg.listen] != "" || cfg.listen != ":8083" {
		t.Fatalf("default --listen %s, want :8083 (%s is %s)", cfg.listen, cfg.listen, taken[cfg.listen])
	}
}
