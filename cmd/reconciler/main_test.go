package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/testserver"
)

func TestValidateApp(t *testing.T) {
	o := defaultOptions()
	if err := fx.ValidateApp(serveModule(o, slog.New(slog.DiscardHandler))); err != nil {
		t.Fatal(err)
	}
}

// setQuotaEnv makes env the only QUOTA_* variables for the rest of the test
// (ff reads the process environment; an empty variable counts as unset).
func setQuotaEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix+"_") {
			t.Setenv(k, "")
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		cmd     string
		args    []string
		env     map[string]string
		check   func(options) bool
		wantErr string
	}{
		{"defaults", "serve", nil, nil, func(o options) bool { return o.Listen == ":8082" && o.NATS != "" }, ""},
		{"env", "serve", nil, map[string]string{"QUOTA_NATS": "nats://n:1", "QUOTA_POSTGRES": "postgres://db/x", "QUOTA_LISTEN": ":9"},
			func(o options) bool {
				return o.NATS == "nats://n:1" && o.Postgres == "postgres://db/x" && o.Listen == ":9"
			}, ""},
		{"flag beats env", "serve", []string{"--listen", ":7"}, map[string]string{"QUOTA_LISTEN": ":9"},
			func(o options) bool { return o.Listen == ":7" }, ""},
		{"tls cert without key", "serve", []string{"--nats-tls-cert", "c.pem"}, nil, nil, "--nats-tls-key"},
		{"bad env duration", "serve", nil, map[string]string{"QUOTA_BATCH_INTERVAL": "soon"}, nil, "QUOTA_BATCH_INTERVAL"},
		{"bad env names the flag", "serve", nil, map[string]string{"QUOTA_BATCH_SIZE": "many"}, nil, `"batch-size"`},
		{"bad flag value", "serve", []string{"--batch-interval", "soon"}, nil, nil, "-batch-interval"},
		{"flag hides a bad env value", "serve", []string{"--batch-size", "7"}, map[string]string{"QUOTA_BATCH_SIZE": "many"},
			func(o options) bool { return o.BatchSize == 7 }, ""},
		{"empty env is unset", "serve", nil, map[string]string{"QUOTA_LISTEN": ""},
			func(o options) bool { return o.Listen == ":8082" }, ""},
		{"validation", "serve", []string{"--batch-size", "0"}, nil, nil, "--batch-size"},
		{"positional argument", "serve", []string{"extra"}, nil, nil, "unexpected arguments"},
		{"usage flags", "usage", []string{"--key", "k", "--from", "a", "--to", "b", "--format", "csv"}, nil,
			func(o options) bool { return o.Key == "k" && o.Format == "csv" }, ""},
		{"usage bad format", "usage", []string{"--format", "xml"}, nil, nil, "--format"},
		{"migrate has no --nats", "migrate", []string{"--nats", "x"}, nil, nil, "not defined"},
		{"migrate ignores QUOTA_NATS", "migrate", nil, map[string]string{"QUOTA_NATS": "nats://n:1", "QUOTA_POSTGRES": "postgres://db/m"},
			func(o options) bool { return o.Postgres == "postgres://db/m" && o.NATS == defaultOptions().NATS }, ""},
		{"usage reads QUOTA_KEY", "usage", nil, map[string]string{"QUOTA_KEY": "k", "QUOTA_GRANULARITY": "day"},
			func(o options) bool { return o.Key == "k" && o.Granularity == "day" }, ""},
		{"billing defaults", "serve", nil, nil, func(o options) bool {
			return o.BillingToken == "" && o.BillingMaxConns == 4 && o.Billing.StatementTimeout == 5*time.Second &&
				o.Billing.MaxRows == 10000 && o.ShutdownDelay == 5*time.Second
		}, ""},
		{"billing tokens from env", "serve", nil, map[string]string{"QUOTA_BILLING_TOKEN": "aaaaaaaaaaaaaaaa, prefix:acct_=bbbbbbbbbbbbbbbb"},
			func(o options) bool {
				a, err := o.billingAccess()
				s, aerr := a.Authorize("Bearer bbbbbbbbbbbbbbbb")
				return err == nil && aerr == nil && s.Prefix == "acct_" && fmt.Sprintf("%+v", o) != "" &&
					!strings.Contains(fmt.Sprintf("%+v %v", o, o.BillingToken), "bbbbbbbbbbbbbbbb")
			}, ""},
		{"billing flags from env", "serve", nil, map[string]string{"QUOTA_BILLING_MAX_CONNS": "2", "QUOTA_BILLING_STATEMENT_TIMEOUT": "750ms",
			"QUOTA_BILLING_MAX_ROWS": "100", "QUOTA_SHUTDOWN_DELAY": "0s"},
			func(o options) bool {
				return o.BillingMaxConns == 2 && o.Billing.StatementTimeout == 750*time.Millisecond && o.Billing.MaxRows == 100 && o.ShutdownDelay == 0
			}, ""},
		{"bad billing token", "serve", []string{"--billing-token", "aaaaaaaaaaaaaaaa,shortsecret"}, nil, nil, "--billing-token: entry 2: a token must be 16 to 256 bytes"},
		{"bad billing token from env", "serve", nil, map[string]string{"QUOTA_BILLING_TOKEN": "prefix:=aaaaaaaaaaaaaaaa"}, nil, "--billing-token: entry 1"},
		{"billing max conns", "serve", []string{"--billing-max-conns", "0"}, nil, nil, "--billing-max-conns"},
		{"billing statement timeout", "serve", []string{"--billing-statement-timeout", "0s"}, nil, nil, "--billing-statement-timeout"},
		{"billing max rows", "serve", []string{"--billing-max-rows", "0"}, nil, nil, "--billing-max-rows"},
		{"shutdown delay", "serve", []string{"--shutdown-delay", "-1s"}, nil, nil, "--shutdown-delay"},
		{"otlp endpoint not a URL", "serve", []string{"--otlp-endpoint", "collector:4318"}, nil, nil, "--otlp-endpoint"},
		{"otlp endpoint from env", "serve", nil, map[string]string{"QUOTA_OTLP_ENDPOINT": "http://collector:4318"},
			func(o options) bool { return o.OTLPEndpoint == "http://collector:4318" }, ""},
		{"every bad flag named", "serve", []string{"--billing-max-rows", "0", "--batch-size", "0"}, nil, nil, "--batch-size: must be at least 1"},
		{"usage takes the query limits", "usage", []string{"--billing-max-rows", "5", "--billing-statement-timeout", "1s"}, nil,
			func(o options) bool { return o.Billing.MaxRows == 5 && o.Billing.StatementTimeout == time.Second }, ""},
		{"usage takes no token", "usage", []string{"--billing-token", "aaaaaaaaaaaaaaaa"}, nil, nil, "not defined"},
		{"regions name the durable", "serve", []string{"--regions", "eu, us"}, nil,
			func(o options) bool {
				r, err := o.regions()
				return err == nil && len(r) == 2 && o.Durable == "reconciler-eu-us"
			}, ""},
		{"regions keep a given durable", "serve", nil, map[string]string{"QUOTA_REGIONS": "ap", "QUOTA_DURABLE": "ledger-ap"},
			func(o options) bool { return o.Durable == "ledger-ap" }, ""},
		{"no regions: every region", "serve", nil, nil,
			func(o options) bool {
				r, err := o.regions()
				return err == nil && r == nil && o.Durable == "reconciler"
			}, ""},
		{"region not a subject token", "serve", []string{"--regions", "eu,u.s"}, nil, nil, `--regions: entry 2 "u.s"`},
		{"region twice", "serve", []string{"--regions", "eu,eu"}, nil, nil, `--regions: region "eu" appears twice`},
		{"empty region", "serve", []string{"--regions", "eu,,us"}, nil, nil, "--regions: entry 2"},
		{"write parallel default", "serve", nil, nil, func(o options) bool { return o.WriteParallel == 2 }, ""},
		{"write parallel from env", "serve", nil, map[string]string{"QUOTA_WRITE_PARALLEL": "4"},
			func(o options) bool { return o.WriteParallel == 4 }, ""},
		{"write parallel zero", "serve", []string{"--write-parallel", "0"}, nil, nil, "--write-parallel: must be 1 to 64, got 0"},
		{"write parallel negative", "serve", []string{"--write-parallel", "-1"}, nil, nil, "--write-parallel: must be 1 to 64, got -1"},
		{"write parallel too many", "serve", []string{"--write-parallel", "65"}, nil, nil, "--write-parallel: must be 1 to 64, got 65"},
		{"close after default", "serve", nil, nil, func(o options) bool { return o.CloseAfter == 15*time.Minute }, ""},
		{"close after from env", "serve", nil, map[string]string{"QUOTA_CLOSE_AFTER": "2s"},
			func(o options) bool { return o.CloseAfter == 2*time.Second }, ""},
		{"close after zero", "serve", []string{"--close-after", "0s"}, nil, nil, "--close-after: must be positive and at most 744h0m0s, got 0s"},
		{"close after negative", "serve", nil, map[string]string{"QUOTA_CLOSE_AFTER": "-1m"}, nil, "--close-after: must be positive"},
		{"close after too long", "serve", []string{"--close-after", "745h"}, nil, nil, "--close-after: must be positive and at most"},
		{"write parallel not a number", "serve", []string{"--write-parallel", "two"}, nil, nil, "-write-parallel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setQuotaEnv(t, tt.env)
			o, err := parseFlags(tt.cmd, tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "shortsecret") || strings.Contains(err.Error(), "aaaaaaaaaaaaaaaa") {
					t.Fatalf("err %q quotes a token", err)
				}
				return
			}
			if err != nil || !tt.check(o) {
				t.Fatalf("options %+v, err %v", o, err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:secret@db:5432/q?sslmode=verify-full", "postgres://u:xxxxx@db:5432/q?sslmode=verify-full"},
		{"nats://a:pw@n1:4222,nats://n2:4222", "nats://a:xxxxx@n1:4222,nats://n2:4222"},
		{"postgres://db/q?password=hunter2", "postgres://db/q?password=xxxxx"},
		// libpq keyword/value strings (issue 28, item 10)
		{"host=db user=u password=secret dbname=q", "host=db user=u password=xxxxx dbname=q"},
		{"password=secret host=db", "password=xxxxx host=db"},
		{"host=db PASSWORD = secret sslpassword=hunter2", "host=db PASSWORD = xxxxx sslpassword=xxxxx"},
		{`host=db password='se cret \' secret' dbname=q`, "host=db password=xxxxx dbname=q"},
		{`host=db password='secret`, "host=db password=xxxxx"},
		{"host=db password= user=u", "host=db password= xxxxx"}, // libpq: the value is "user=u"
		{"host=db sslmode=require", "host=db sslmode=require"},
	}
	for _, tt := range tests {
		if got := redact(tt.in); got != tt.want || strings.Contains(got, "secret") || strings.Contains(got, "hunter2") {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMigrateUsageAndServe(t *testing.T) {
	db := testserver.NewDatabase(t)
	setQuotaEnv(t, map[string]string{"QUOTA_POSTGRES": db})
	var out bytes.Buffer
	if err := run([]string{"migrate"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"migrate"}, &out, io.Discard); err != nil { // idempotent
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"usage", "--key", "k", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z", "--format", "csv"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := "k,total,,0,0,0,0,0,0,false,true,0,0,0,0\n"; !strings.HasSuffix(out.String(), want) {
		t.Fatalf("usage csv:\n%s", out.String())
	}
	if err := run([]string{"usage", "--key", "k", "--from", "nope", "--to", "2026-01-02T00:00:00Z"}, &out, io.Discard); err == nil || !strings.Contains(err.Error(), "--from") {
		t.Fatalf("bad --from: %v", err)
	}

	if err := run([]string{"usage", "--key", "k", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-03T00:00:00Z",
		"--billing-max-rows", "24"}, &out, io.Discard); err == nil || !strings.Contains(err.Error(), "--to") ||
		!strings.Contains(err.Error(), "limit of 24") {
		t.Fatalf("usage over the row limit: %v", err)
	}

	// serve without --billing-token: the fx app starts, answers health and
	// readiness, refuses /v1/usage, and drains when it stops.
	o := defaultOptions()
	o.NATS = testserver.StartNATS(t).URL
	o.Postgres = db
	o.Listen = fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	o.ShutdownDelay = 2 * time.Second
	app := fx.New(serveModule(o, slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	status := func(path, auth string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+o.Listen+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body), nil
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			code, body, err := status(path, "")
			if err != nil {
				return err
			}
			if code != 200 {
				return fmt.Errorf("%s: %d %s", path, code, body)
			}
			if path == "/metrics" && (!strings.Contains(body, "quota_reconciler_consumer_pending") ||
				!strings.Contains(body, "quota_reconciler_windows_closed_total 0")) {
				return fmt.Errorf("/metrics lacks reconciler or window closer metrics")
			}
			return nil
		})
	}
	for _, auth := range []string{"", "Bearer aaaaaaaaaaaaaaaa"} {
		code, body, err := status("/v1/usage?key=k&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z", auth)
		if err != nil || code != 503 || !strings.Contains(body, "billing API disabled: set --billing-token") {
			t.Fatalf("/v1/usage without --billing-token (auth %q): %d %s %v", auth, code, body, err)
		}
	}

	stopped := make(chan error, 1)
	go func() { stopped <- app.Stop(ctx) }()
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if code, body, err := status("/readyz", ""); err != nil || code != 503 || !strings.Contains(body, "shutting down") {
			return fmt.Errorf("/readyz while draining: %d %s %v", code, body, err)
		}
		return nil
	})
	if code, _, err := status("/healthz", ""); err != nil || code != 200 {
		t.Fatalf("/healthz while draining: %d %v; want 200 (still serving)", code, err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if _, _, err := status("/healthz", ""); err == nil {
		t.Fatal("/healthz answers after Stop")
	}
}
