package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// export, events and sinks-report against a migrated database: the export
// prints every key of the month, events posts each closed period once,
// sinks-report shows no difference afterwards; bad flags name themselves.
func TestBillingCommands(t *testing.T) {
	db := migratedDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	at := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	var reps []ledger.Report
	for _, k := range []string{"acct_b", "acct_a"} {
		reps = append(reps, ledger.Report{Key: k, WindowStart: at, WindowEnd: at.Add(time.Minute), ProcessID: "p1",
			Region: "eu", Spent: 11, Final: true, Seq: 1, SentAt: at})
	}
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := run([]string{"export", "--month", "2026-11", "--format", "csv"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "acct_a,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,month,11,0,0,1,true,") ||
		!strings.HasPrefix(lines[2], "acct_b,") || lines[3] != "#end,2" {
		t.Fatalf("export:\n%s", out.String())
	}
	out.Reset()
	if err := run([]string{"export", "--month", "2026-11", "--granularity", "hour", "--format", "csv"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 4 ||
		!strings.HasPrefix(lines[1], "acct_a,2026-11-05T10:00:00Z,2026-11-05T11:00:00Z,hour,11,0,0,1,true,") {
		t.Fatalf("export --granularity hour:\n%s", out.String())
	}
	// On the plan calendar acct_a's month runs from the 5th in New York;
	// acct_b has no plan: UTC.
	if _, err := pool.Exec(ctx, `INSERT INTO quota_plans (name, time_zone, anchor_day, revision) VALUES ('ny5', 'America/New_York', 5, 1);
		INSERT INTO quota_key_plans (key, plan, revision) VALUES ('acct_a', 'ny5', 2)`); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"export", "--month", "2026-11", "--calendar", "plan"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 4 ||
		!strings.HasPrefix(lines[1], "acct_a,2026-11-05T05:00:00Z,2026-12-05T05:00:00Z,month,11,0,0,1,") ||
		!strings.HasPrefix(lines[2], "acct_b,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,month,11,0,0,1,") {
		t.Fatalf("export --calendar plan:\n%s", out.String())
	}

	var mu sync.Mutex
	ids := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct{ ID string }
		_ = json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		ids[ev.ID]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	metrics := filepath.Join(t.TempDir(), "events.prom")
	for range 2 {
		if err := run([]string{"events", "--sink", srv.URL, "--month", "2026-11", "--metrics-file", metrics}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(ids) != 2 || ids[""] != 0 {
		t.Fatalf("events received: %v, want 2 distinct, each once", ids)
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("event %s received %d times", id, n)
		}
	}
	mu.Unlock()
	prom, err := os.ReadFile(metrics)
	if err != nil || !strings.Contains(string(prom), `quota_billing_sink_difference{sink="`+srv.URL+`"} 0`) {
		t.Fatalf("metrics file: %s %v", prom, err)
	}
	out.Reset()
	if err := run([]string{"sinks-report", "--month", "2026-11"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := srv.URL + ",2026-11-01T00:00:00Z,22,22,22,0,0"; !strings.Contains(out.String(), want) {
		t.Fatalf("sinks-report:\n%s\nwant a line %q", out.String(), want)
	}

	// events --calendar plan sends acct_c its plan's month (New York from
	// the 2nd, closed by now) and sinks-report --calendar plan compares
	// the sink with those periods.
	if _, err := pool.Exec(ctx, `INSERT INTO quota_plans (name, time_zone, anchor_day, revision) VALUES ('ny2', 'America/New_York', 2, 3);
		INSERT INTO quota_key_plans (key, plan, revision) VALUES ('acct_c', 'ny2', 4)`); err != nil {
		t.Fatal(err)
	}
	atC := time.Date(2026, 11, 2, 6, 0, 0, 0, time.UTC)
	if _, err := reconcile.NewWriter(pool).Write(ctx, []ledger.Report{{Key: "acct_c", WindowStart: atC, WindowEnd: atC.Add(time.Minute),
		ProcessID: "p1", Region: "eu", Spent: 5, Final: true, Seq: 1, SentAt: atC}}); err != nil {
		t.Fatal(err)
	}
	starts := map[string]time.Time{}
	planSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Data struct {
				Key         string
				PeriodStart time.Time `json:"period_start"`
			}
		}
		_ = json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		starts[ev.Data.Key] = ev.Data.PeriodStart
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer planSrv.Close()
	if err := run([]string{"events", "--sink", planSrv.URL, "--month", "2026-11", "--calendar", "plan"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if got := starts["acct_c"]; !got.Equal(time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC)) {
		t.Fatalf("events --calendar plan sent acct_c's period from %v, want 2026-11-02T05:00:00Z (all: %v)", got, starts)
	}
	mu.Unlock()
	out.Reset()
	if err := run([]string{"sinks-report", "--month", "2026-11", "--sink", planSrv.URL, "--calendar", "plan"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := planSrv.URL + ",2026-11-02T05:00:00Z,5,5,5,0,0"; !strings.Contains(out.String(), want) {
		t.Fatalf("sinks-report --calendar plan:\n%s\nwant a line %q", out.String(), want)
	}

	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"export", "--month", "11/2026"}, "--month"},
		{[]string{"export", "--month", "2026-11", "--format", "xml"}, "--format"},
		{[]string{"export", "--month", "2026-11", "--granularity", "week"}, "--granularity"},
		{[]string{"export", "--month", "2026-11", "--calendar", "local"}, "--calendar"},
		{[]string{"events", "--month", "2026-11", "--sink", "http://x", "--granularity", "week"}, "--granularity"},
		{[]string{"events", "--month", "2026-11", "--sink", "http://x", "--continuous"}, "--month"},
		{[]string{"events", "--sink", "http://x", "--continuous", "--every", "1s"}, "--every"},
		{[]string{"events", "--month", "2026-11"}, "--sink"},
		{[]string{"events", "--month", "2026-11", "--sink", "ftp://x"}, "--sink"},
		{[]string{"events", "--month", "2026-11", "--sink", "http://x", "--calendar", "local"}, "--calendar"},
		{[]string{"sinks-report", "--month", "2026-11", "--calendar", "local"}, "--calendar"},
	} {
		if err := run(tt.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tt.flag) {
			t.Errorf("%q: %v, want an error naming %s", tt.args, err, tt.flag)
		}
	}
}

// stripe-customer set/list and stripe-sync against a Stripe stand-in:
// each mapped key's closed period is sent once across two runs, an
// unmapped key is skipped, the secret key goes only into the
// Authorization header (never stdout, stderr at debug, or an error), and
// bad flags name themselves.
func TestStripeCommands(t *testing.T) {
	const secret = "sk_test_51CmdSecretNeverPrinted"
	db := testserver.NewDatabase(t)
	setQuotaEnv(t, map[string]string{"QUOTA_POSTGRES": db, "QUOTA_STRIPE_KEY": secret})
	if err := run([]string{"migrate"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	at := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	var reps []ledger.Report
	for _, k := range []string{"acct_a", "acct_b", "acct_unmapped"} {
		reps = append(reps, ledger.Report{Key: k, WindowStart: at, WindowEnd: at.Add(time.Minute), ProcessID: "p1",
			Region: "eu", Spent: 11, Final: true, Seq: 1, SentAt: at})
	}
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	for _, args := range [][]string{{"--key", "acct_a", "--customer", "cus_A", "--anchor-day", "15", "--time-zone", "Europe/Paris"},
		{"--key", "acct_b", "--customer", "cus_X"}, {"--key", "acct_b", "--customer", "cus_B"}} {
		if err := run(append([]string{"stripe-customer", "set"}, args...), &out, &errOut); err != nil {
			t.Fatal(err)
		}
	}
	if err := run([]string{"stripe-customer", "list"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "key,stripe_customer_id,updated_at,anchor_day,time_zone" ||
		!strings.HasPrefix(lines[1], "acct_a,cus_A,") || !strings.HasSuffix(lines[1], ",15,Europe/Paris") ||
		!strings.HasPrefix(lines[2], "acct_b,cus_B,") || !strings.HasSuffix(lines[2], ",0,") {
		t.Fatalf("stripe-customer list:\n%s", out.String())
	}

	var mu sync.Mutex
	var sent []string // guarded by mu: customer=value identifier
	// Stripe's v2 meter event stream (--stripe-batch 2 to 100): a
	// session opened with the secret key, events sent with its token.
	const token = "ek_test_cmdsession"
	stream := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v2/billing/meter_event_session" && r.Header.Get("Authorization") == "Bearer "+secret:
			fmt.Fprintf(w, `{"id":"mes_1","object":"v2.billing.meter_event_session","authentication_token":%q,"expires_at":%q}`,
				token, time.Now().Add(15*time.Minute).UTC().Format(time.RFC3339))
			return
		case r.URL.Path == "/v2/billing/meter_event_stream" && r.Header.Get("Authorization") == "Bearer "+token:
			var body struct {
				Events []struct {
					EventName  string            `json:"event_name"`
					Identifier string            `json:"identifier"`
					Payload    map[string]string `json:"payload"`
				} `json:"events"`
			}
			if json.NewDecoder(r.Body).Decode(&body) == nil && len(body.Events) > 0 {
				mu.Lock()
				for _, e := range body.Events {
					sent = append(sent, e.Payload["stripe_customer_id"]+"="+e.Payload["value"]+" "+e.Identifier)
				}
				mu.Unlock()
				_, _ = io.WriteString(w, `{}`)
				return
			}
		}
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request","message":"bad request"}}`)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/") {
			stream(w, r)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/billing/meter_events" || r.Header.Get("Authorization") != "Bearer "+secret ||
			r.ParseForm() != nil || r.PostForm.Get("event_name") != "api_requests" {
			http.Error(w, `{"error":{"type":"invalid_request_error","message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		sent = append(sent, r.PostForm.Get("payload[stripe_customer_id]")+"="+r.PostForm.Get("payload[value]")+" "+r.PostForm.Get("identifier"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"billing.meter_event","event_name":"api_requests","identifier":"x","payload":{},"timestamp":1}`)
	}))
	defer srv.Close()
	// The first run sends through the v2 stream in one request, the
	// second (the default, v1) has nothing left to send.
	args := []string{"stripe-sync", "--month", "2026-11", "--meter", "api_requests", "--stripe-url", srv.URL, "--log-level", "debug"}
	for _, extra := range [][]string{{"--stripe-batch", "100"}, nil} {
		if err := run(append(args, extra...), &out, &errOut); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(errOut.String(), `"sent":2,`) || !strings.Contains(errOut.String(), `"requests":1,`) {
		t.Fatalf("log does not show 2 events sent in 1 request:\n%s", errOut.String())
	}
	mu.Lock()
	if len(sent) != 2 || !strings.HasPrefix(sent[0], "cus_A=11 qu-") || !strings.HasPrefix(sent[1], "cus_B=11 qu-") {
		t.Fatalf("meter events: %q, want cus_A and cus_B once each", sent)
	}
	mu.Unlock()
	if !strings.Contains(errOut.String(), `"unmapped_keys":1`) {
		t.Fatalf("log does not count the unmapped key:\n%s", errOut.String())
	}

	// A late report while Stripe is down: the run fails, naming no secret.
	late := reps[0]
	late.ProcessID, late.Spent = "p1~late1", 2
	if _, err := reconcile.NewWriter(pool).Write(ctx, []ledger.Report{late}); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if err := run(args, &out, &errOut); err == nil || !strings.Contains(err.Error(), "not acknowledged") || strings.Contains(err.Error(), secret) {
		t.Fatalf("Stripe down: %v, want a refusal that names no secret", err)
	}
	for _, tt := range []struct {
		args []string
		env  map[string]string
		flag string
	}{
		{[]string{"stripe-sync", "--month", "2026-11"}, nil, "--meter"},
		{[]string{"stripe-sync", "--meter", "m"}, nil, "--month"},
		{[]string{"stripe-sync", "--month", "2026-11", "--meter", "m", "--stripe-url", "ftp://x"}, nil, "--stripe-url"},
		{[]string{"stripe-sync", "--month", "2026-11", "--meter", "m", "--stripe-key-env", "QUOTA_NO_SUCH_KEY"}, nil, "QUOTA_NO_SUCH_KEY"},
		{[]string{"stripe-sync", "--month", "2026-11", "--meter", "m"}, map[string]string{"QUOTA_STRIPE_KEY": ""}, "QUOTA_STRIPE_KEY"},
		{[]string{"stripe-customer", "set", "--key", "k", "--customer", "sub_1"}, nil, "--customer"},
		{[]string{"stripe-customer", "set", "--customer", "cus_1"}, nil, "--key"},
		{[]string{"stripe-customer", "set", "--key", "k", "--customer", "cus_1", "--from", "noon"}, nil, "--from"},
		{[]string{"stripe-settle", "--meter", "m", "--event-id", "qu-1", "--outcome", "maybe"}, nil, "--outcome"},
		{[]string{"stripe-settle", "--meter", "m", "--event-id", "qu-1", "--outcome", "delivered"}, nil, "--event-id"},
		{[]string{"stripe-customer", "set", "--key", "k", "--customer", "cus_1", "--anchor-day", "5"}, nil, "--time-zone"},
		{[]string{"stripe-customer", "set", "--key", "k", "--customer", "cus_1", "--anchor-day", "5", "--time-zone", "Mars/Olympus"}, nil, "--time-zone"},
		{[]string{"stripe-sync", "--month", "2026-11", "--meter", "m", "--finalization-grace", "100h"}, nil, "--finalization-grace"},
		{[]string{"stripe-sync", "--month", "2026-11", "--meter", "m", "--calendar", "local"}, nil, "--calendar"},
		{[]string{"stripe-customer"}, nil, "set or list"},
	} {
		for k, v := range tt.env {
			t.Setenv(k, v)
		}
		err := run(tt.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.flag) || strings.Contains(err.Error(), secret) {
			t.Errorf("%q: %v, want an error naming %s", tt.args, err, tt.flag)
		}
		t.Setenv("QUOTA_STRIPE_KEY", secret)
	}
	if strings.Contains(out.String()+errOut.String(), secret) || strings.Contains(out.String()+errOut.String(), "sk_test_") {
		t.Fatalf("the secret key was printed:\n%s\n%s", out.String(), errOut.String())
	}
}

// migratedDatabase is a new database, migrated by `reconciler migrate`, that
// the commands under test reach through QUOTA_POSTGRES.
func migratedDatabase(t *testing.T) string {
	t.Helper()
	db := testserver.NewDatabase(t)
	setQuotaEnv(t, map[string]string{"QUOTA_POSTGRES": db})
	if err := run([]string{"migrate"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	return db
}
