package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

func TestQuotaBaseSubjectFlag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantErr string
	}{
		{"default", nil, nil, "quota.base", ""},
		{"flag", []string{"--quota-base-subject", "ledger.base"}, nil, "ledger.base", ""},
		{"env", nil, map[string]string{"QUOTA_QUOTA_BASE_SUBJECT": "eu.quota.base"}, "eu.quota.base", ""},
		{"wildcard", []string{"--quota-base-subject", "quota.*"}, nil, "", "--quota-base-subject: "},
		{"empty token", []string{"--quota-base-subject", "quota..base"}, nil, "", "--quota-base-subject: "},
		{"empty", nil, map[string]string{"QUOTA_QUOTA_BASE_SUBJECT": " "}, "", "--quota-base-subject: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setQuotaEnv(t, tc.env)
			o, err := parseFlags("serve", tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || o.QuotaBaseSubject != tc.want {
				t.Fatalf("subject %q, err %v; want %q", o.QuotaBaseSubject, err, tc.want)
			}
		})
	}
	if _, err := parseFlags("usage", []string{"--quota-base-subject", "x"}, io.Discard); err == nil {
		t.Error("usage took --quota-base-subject")
	}
}

// reconciler serve answers quota bases from its ledger on
// --quota-base-subject, and counts them on /metrics.
func TestServeAnswersQuotaBases(t *testing.T) {
	db := ledgertest.MigratedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	window := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	var reps []ledger.Report
	for _, r := range []struct {
		region string
		spent  int64
	}{{"eu", 40}, {"us", 2}} {
		reps = append(reps, ledger.Report{Key: "acct_1", Region: r.region, ProcessID: r.region + "-1@a",
			WindowStart: window, WindowEnd: window.Add(time.Minute), Spent: r.spent, Leased: r.spent,
			Final: true, Seq: 1, SentAt: window.Add(time.Minute)})
	}
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}

	o := defaultOptions()
	o.NATS = testserver.StartNATS(t).URL
	o.Postgres = db
	o.Listen = fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	o.ShutdownDelay = 0
	o.QuotaBaseSubject = "ledger.quota.base"
	app := fx.New(serveModule(o, slog.New(slog.DiscardHandler)))
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := app.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()

	nc, err := nats.Connect(o.NATS)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg := quotabase.DefaultClientConfig()
	cfg.Subject, cfg.Timeout = o.QuotaBaseSubject, 5*time.Second
	client, err := quotabase.NewClient(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// The app's subscription may not have reached the NATS server yet (it
	// is another connection): ask until it answers.
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		base, err := client.QuotaBase(ctx, "acct_1", start, start.AddDate(0, 1, 0))
		if err != nil {
			return err
		}
		if base.Total != 42 || base.ByRegion["eu"] != 40 || base.ByRegion["us"] != 2 {
			return fmt.Errorf("base %+v, want 42: eu 40, us 2", base)
		}
		return nil
	})
	resp, err := http.Get("http://" + o.Listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `quota_reconciler_quota_base_requests_total{result="ok"} 1`) {
		t.Errorf("/metrics lacks the quota-base request:\n%s", body)
	}
}
