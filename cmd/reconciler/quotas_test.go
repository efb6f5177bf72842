package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/catalogtest"
	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/period"
)

// serve mirrors the catalogue (started after it, with the bucket created
// later by the control plane) into the ledger, GET /v1/usage/quotas and
// `usage --quotas` answer from it, and a reassignment reaches them.
func TestServeBillsByPeriod(t *testing.T) {
	var o options
	d := startDaemon(t, func(opts *options) {
		opts.BillingToken = edge.Secret(tokOld)
		o = *opts
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	nc, err := nats.Connect(o.NATS)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := catalog.DefaultConfig()
	ccfg.RetryInterval, ccfg.Logger = 50*time.Millisecond, slog.New(slog.DiscardHandler)
	cat := catalogtest.Start(t, js, ccfg)
	qs, err := limit.NewQuotas([]limit.Quota{{Period: period.Month, Limit: 1000}, {Period: period.Day, Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	for name, zone := range map[string]string{"pro": "Asia/Kolkata", "team": "America/Santiago"} {
		if _, err := cat.PutPlan(ctx, "test", name, limit.Plan{Rate: 10, Capacity: 10, Quotas: qs, TimeZone: zone, AnchorDay: 31}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cat.Assign(ctx, "test", "acct_1", "pro"); err != nil {
		t.Fatal(err)
	}
	// Kolkata is +05:30: 2026-04-30 is April's anchor (its last day), from
	// 2026-04-29T18:30Z; a refund in the period lowers used.
	w := func(start string, spent, refunded int64) ledger.Report {
		s, _ := time.Parse(time.RFC3339, start)
		return ledger.Report{Key: "acct_1", WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: "p1", Region: "eu",
			Spent: spent, Refunded: refunded, Final: true, Seq: 1, SentAt: s}
	}
	if _, err := reconcile.NewWriter(d.pool).Write(ctx, []ledger.Report{
		w("2026-04-29T18:29:00Z", 500, 0), w("2026-04-29T18:30:00Z", 30, 0), w("2026-05-02T00:00:00Z", 20, 5),
	}); err != nil {
		t.Fatal(err)
	}

	get := func(query string) billing.QuotaResult {
		t.Helper()
		var res billing.QuotaResult
		testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			req, _ := http.NewRequest(http.MethodGet, d.base+"/v1/usage/quotas?"+query, nil)
			req.Header.Set("Authorization", "Bearer "+tokOld)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			return json.Unmarshal(body, &res)
		})
		return res
	}
	var res billing.QuotaResult
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if res = get("key=acct_1&at=2026-05-10T00:00:00Z"); res.Plan != "pro" {
			return fmt.Errorf("plan %q: the mirror has not caught up", res.Plan)
		}
		return nil
	})
	month := billing.QuotaUsage{Period: period.Month, Start: time.Date(2026, 4, 29, 18, 30, 0, 0, time.UTC),
		End: time.Date(2026, 5, 30, 18, 30, 0, 0, time.UTC), Limit: 1000, Used: 45, Remaining: 955}
	if res.TimeZone != "Asia/Kolkata" || res.AnchorDay != 31 || len(res.Quotas) != 2 || res.Quotas[1] != month {
		t.Fatalf("answer %+v, want the month %+v", res, month)
	}

	var out bytes.Buffer
	for _, tc := range []struct{ format, want string }{
		{"csv", "acct_1,pro,Asia/Kolkata,31,2026-05-10T00:00:00Z,month,2026-04-29T18:30:00Z,2026-05-30T18:30:00Z,1000,45,955\n"},
		{"text", "month  2026-04-30 00:00 +05:30  2026-05-31 00:00 +05:30   1000    45        955"},
		{"json", `"remaining": 955`},
	} {
		out.Reset()
		if err := run([]string{"usage", "--quotas", "--key", "acct_1", "--at", "2026-05-10T00:00:00Z", "--postgres", o.Postgres,
			"--format", tc.format}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Fatalf("usage --quotas --format %s:\n%s\nwant a line with %q", tc.format, out.String(), tc.want)
		}
	}

	if _, err := cat.Assign(ctx, "test", "acct_1", "team"); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if res = get("key=acct_1&at=2026-05-10T00:00:00Z"); res.Plan != "team" || res.TimeZone != "America/Santiago" {
			return fmt.Errorf("plan %q zone %q after the reassignment", res.Plan, res.TimeZone)
		}
		return nil
	})
}

func TestUsageQuotasFlags(t *testing.T) {
	setQuotaEnv(t, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--quotas", "--key", "k", "--format", "xml"}, "--format"},
		{[]string{"--quotas", "--key", "k", "--from", "2026-01-01T00:00:00Z"}, "--from"},
		{[]string{"--key", "k", "--at", "2026-01-01T00:00:00Z"}, "--at"},
		{[]string{"--key", "k", "--format", "text"}, "--format"},
	} {
		if _, err := parseFlags("usage", tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	o, err := parseFlags("usage", []string{"--quotas", "--key", "k", "--at", "2026-01-01T00:00:00Z", "--format", "text"}, io.Discard)
	if err != nil || !o.Quotas || o.At != "2026-01-01T00:00:00Z" {
		t.Fatalf("%+v, %v", o, err)
	}
	// Bad input is named before Postgres is asked.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"usage", "--quotas", "--at", "2026-01-01T00:00:00Z"}, "--key"},
		{[]string{"usage", "--quotas", "--key", "k", "--at", "noon"}, "--at"},
	} {
		if err := run(append(tc.args, "--postgres", "postgres://nobody@127.0.0.1:1/none"), io.Discard, io.Discard); err == nil ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		bucket string
		ok     bool
	}{{"quota-catalog", true}, {"", true}, {"my_bucket-2", true}, {"a.b", false}, {"a b", false}, {"a*", false}} {
		_, err := parseFlags("serve", []string{"--catalog-bucket", tc.bucket}, io.Discard)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "--catalog-bucket")) {
			t.Errorf("--catalog-bucket %q: %v", tc.bucket, err)
		}
	}
	if o, _ := parseFlags("serve", nil, io.Discard); o.CatalogBucket != catalog.DefaultConfig().Bucket {
		t.Errorf("default --catalog-bucket %q, want the limiters' %q", o.CatalogBucket, catalog.DefaultConfig().Bucket)
	}
}
