package quotabase_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/quotabase/pgledger"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// A key's base in a period is exactly what the ledger holds for the
// windows that start in it: every process and region added up, net of
// refunds and with post-hoc charges, by region, across month partitions,
// start inclusive and end exclusive, in any time zone the request spells.
func TestQuotaBaseExact(t *testing.T) {
	url := ledgertest.MigratedDatabase(t)
	cfg := quotabase.DefaultConfig()
	pool := ledgerPool(t, url, cfg)
	nc := connect(t, natsServer(t))
	reg := prometheus.NewRegistry()
	cfg.Metrics = quotabase.NewMetrics(reg)
	startServer(t, nc, pool, cfg)
	client := newClient(t, nc, 5*time.Second)

	var reps []ledger.Report
	for _, key := range []string{"acct_1", "acct_2", "acct_10"} {
		scale := map[string]int64{"acct_1": 1, "acct_2": 1_000, "acct_10": 1_000_000}[key]
		reps = append(reps,
			report(key, "eu", "eu-1@a", utc("2026-10-31T23:59:00Z"), 50_000*scale, 0, 0),
			report(key, "eu", "eu-1@a", utc("2026-11-01T00:00:00Z"), 10*scale, 0, 0),
			report(key, "eu", "eu-1@a", utc("2026-11-15T12:00:00Z"), 20*scale, 3*scale, 0),
			report(key, "eu", "eu-2@a", utc("2026-11-15T12:00:00Z"), 7*scale, 0, 4*scale),
			report(key, "eu", "eu-1@a", utc("2026-11-30T23:59:00Z"), 5*scale, 0, 0),
			report(key, "us", "us-1@a", utc("2026-11-02T00:00:00Z"), 100*scale, 0, 0),
			report(key, "us", "us-1@a", utc("2026-11-30T23:59:00Z"), 1*scale, 0, 0),
			report(key, "ap", "ap-1@a", utc("2026-11-20T00:00:00Z"), 0, 0, 0), // a region with nothing spent
			report(key, "eu", "eu-1@a", utc("2026-12-01T00:00:00Z"), 1_000*scale, 0, 0),
			report(key, "us", "us-1@a", utc("2026-12-31T23:59:00Z"), 2_000*scale, 0, 0),
		)
	}
	write(t, writerPool(t, url), reps)

	for _, tc := range []struct {
		name       string
		key        string
		start, end string
		want       map[string]int64
	}{
		{"November", "acct_1", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", map[string]int64{"eu": 10 + 17 + 11 + 5, "us": 101}},
		{"December", "acct_1", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", map[string]int64{"eu": 1_000, "us": 2_000}},
		{"two months, two partitions", "acct_1", "2026-11-01T00:00:00Z", "2027-01-01T00:00:00Z", map[string]int64{"eu": 1_043, "us": 2_101}},
		{"one day", "acct_1", "2026-11-15T00:00:00Z", "2026-11-16T00:00:00Z", map[string]int64{"eu": 28}},
		{"start is inclusive", "acct_1", "2026-11-01T00:00:00Z", "2026-11-01T00:01:00Z", map[string]int64{"eu": 10}},
		{"end is exclusive", "acct_1", "2026-10-31T00:00:00Z", "2026-11-01T00:00:00Z", map[string]int64{"eu": 50_000}},
		{"a month in UTC+1", "acct_1", "2026-11-01T00:00:00+01:00", "2026-12-01T00:00:00+01:00", map[string]int64{"eu": 50_000 + 10 + 28, "us": 100}},
		{"another key", "acct_10", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", map[string]int64{"eu": 43_000_000, "us": 101_000_000}},
		{"an empty month", "acct_1", "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z", nil},
		{"an unknown key", "acct_unknown", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			got, err := client.QuotaBase(context.Background(), tc.key, utc(tc.start), utc(tc.end))
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, v := range tc.want {
				total += v
			}
			if got.Total != total || !maps.Equal(got.ByRegion, tc.want) {
				t.Errorf("base = %d %v, want %d %v", got.Total, got.ByRegion, total, tc.want)
			}
			if got.AsOf.Before(before.Add(-time.Second)) || got.AsOf.After(time.Now().Add(time.Second)) {
				t.Errorf("as_of %v is not the time of the request (%v)", got.AsOf, before)
			}
		})
	}
	if got := testutil.ToFloat64(cfg.Metrics.Requests.WithLabelValues(quotabase.ResultOK)); got != 10 {
		t.Errorf("requests{result=ok} = %v, want 10", got)
	}
	if n, err := testutil.GatherAndCount(reg, "quota_reconciler_quota_base_seconds"); err != nil || n != 1 {
		t.Errorf("latency histogram: %d series, %v", n, err)
	}
}

// A bad request is answered with an error naming its field, from the
// Client (a *quotabase.FieldError) and on the wire; it runs no query.
func TestBadRequests(t *testing.T) {
	cfg := quotabase.DefaultConfig()
	cfg.Metrics = quotabase.NewMetrics(nil)
	pool := ledgerPool(t, ledgertest.MigratedDatabase(t), cfg)
	nc := connect(t, natsServer(t))
	startServer(t, nc, pool, cfg)
	client := newClient(t, nc, 5*time.Second)
	start := utc("2026-11-01T00:00:00Z")

	t.Run("client", func(t *testing.T) {
		for _, tc := range []struct {
			name, key  string
			start, end time.Time
			field      string // "": no error
		}{
			{"empty key", "", start, start.AddDate(0, 1, 0), "key"},
			{"key too long", strings.Repeat("k", 513), start, start.AddDate(0, 1, 0), "key"},
			{"key with a space", "acct 1", start, start.AddDate(0, 1, 0), "key"},
			{"key with a control byte", "acct\x001", start, start.AddDate(0, 1, 0), "key"},
			{"end before start", "acct_1", start, start.Add(-time.Hour), "end"},
			{"empty period", "acct_1", start, start, "end"},
			{"401 days", "acct_1", start, start.Add(401 * 24 * time.Hour), "end"},
			{"400 days", "acct_1", start, start.Add(400 * 24 * time.Hour), ""},
			{"longest key", strings.Repeat("k", 512), start, start.AddDate(0, 1, 0), ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := client.QuotaBase(context.Background(), tc.key, tc.start, tc.end)
				if tc.field == "" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				var fe *quotabase.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, quotabase.ErrInvalidRequest) {
					t.Fatalf("err = %v, want a FieldError on %q", err, tc.field)
				}
				if tc.key != "" && strings.Contains(err.Error(), tc.key) {
					t.Errorf("the error quotes the key: %v", err)
				}
			})
		}
	})
	t.Run("wire", func(t *testing.T) {
		for _, tc := range []struct {
			name, body string
			field      string
		}{
			{"not JSON", `acct_1 please`, ""},
			{"not an object", `["acct_1"]`, ""},
			{"missing key", `{"start":"2026-11-01T00:00:00Z","end":"2026-12-01T00:00:00Z"}`, "key"},
			{"missing start", `{"key":"acct_1","end":"2026-12-01T00:00:00Z"}`, "start"},
			{"start not RFC 3339", `{"key":"acct_1","start":"2026-11-01","end":"2026-12-01T00:00:00Z"}`, "start"},
			{"missing end", `{"key":"acct_1","start":"2026-11-01T00:00:00Z"}`, "end"},
			{"end not a time", `{"key":"acct_1","start":"2026-11-01T00:00:00Z","end":"2026-13-01T00:00:00Z"}`, "end"},
			{"start a number", `{"key":"acct_1","start":1,"end":"2026-12-01T00:00:00Z"}`, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				msg, err := nc.Request(quotabase.DefaultSubject, []byte(tc.body), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				var r quotabase.Reply
				if err := json.Unmarshal(msg.Data, &r); err != nil {
					t.Fatalf("reply %q: %v", msg.Data, err)
				}
				if r.Error == "" || r.Field != tc.field {
					t.Fatalf("reply %s, want an error on field %q", msg.Data, tc.field)
				}
			})
		}
	})
	if got := testutil.ToFloat64(cfg.Metrics.Requests.WithLabelValues(quotabase.ResultInvalid)); got != 15 {
		t.Errorf("requests{result=invalid} = %v, want 15", got)
	}
}

// Without a reconciler the Client says so at once (NATS' no responders);
// with one that never answers, after its timeout; a caller's deadline is
// the caller's error.
func TestNoReconciler(t *testing.T) {
	nc := connect(t, natsServer(t))
	start := utc("2026-11-01T00:00:00Z")
	t.Run("no responders", func(t *testing.T) {
		began := time.Now()
		_, err := newClient(t, nc, 10*time.Second).QuotaBase(context.Background(), "acct_1", start, start.AddDate(0, 1, 0))
		if !errors.Is(err, quotabase.ErrNoReconciler) || !strings.Contains(err.Error(), "no responders") {
			t.Fatalf("err = %v, want ErrNoReconciler, no responders", err)
		}
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("no responders took %v", d)
		}
	})
	// A subscriber that hears requests and never answers.
	mute, err := nc.QueueSubscribe(quotabase.DefaultSubject, quotabase.DefaultQueue, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Run("no reply", func(t *testing.T) {
		_, err := newClient(t, nc, 100*time.Millisecond).QuotaBase(context.Background(), "acct_1", start, start.AddDate(0, 1, 0))
		if !errors.Is(err, quotabase.ErrNoReconciler) || !strings.Contains(err.Error(), "no reply") {
			t.Fatalf("err = %v, want ErrNoReconciler, no reply", err)
		}
	})
	t.Run("caller's deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := newClient(t, nc, 10*time.Second).QuotaBase(ctx, "acct_1", start, start.AddDate(0, 1, 0))
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, quotabase.ErrNoReconciler) {
			t.Fatalf("err = %v, want the caller's deadline", err)
		}
	})
}

// holdLedger takes an exclusive lock on usage_reports until release: a
// quota-base query waits for it, as it would for a slow ledger.
func holdLedger(t *testing.T, url string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := writerPool(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE usage_reports IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			if err := tx.Rollback(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(release)
	return release
}

// waitInFlight waits until the Server runs n queries.
func waitInFlight(t *testing.T, m *quotabase.Metrics, n float64) {
	t.Helper()
	testserver.WaitFor(t, 10*time.Second, time.Millisecond, func() error {
		if got := testutil.ToFloat64(m.InFlight); got != n {
			return fmt.Errorf("%v queries in flight, want %v", got, n)
		}
		return nil
	})
}

// Past MaxConcurrent running queries a request is answered busy at once,
// not queued; a query that runs past StatementTimeout is answered with an
// error, not left to hang; Stop cancels what still runs when its context
// ends.
func TestLimits(t *testing.T) {
	url := ledgertest.MigratedDatabase(t)
	start := utc("2026-11-01T00:00:00Z")
	ask := func(c *quotabase.Client) <-chan error {
		out := make(chan error, 1)
		go func() {
			_, err := c.QuotaBase(context.Background(), "acct_1", start, start.AddDate(0, 1, 0))
			out <- err
		}()
		return out
	}
	t.Run("busy", func(t *testing.T) {
		cfg := quotabase.DefaultConfig()
		cfg.MaxConcurrent, cfg.StatementTimeout, cfg.Metrics = 1, 30*time.Second, quotabase.NewMetrics(nil)
		pool := ledgerPool(t, url, cfg)
		nc := connect(t, natsServer(t))
		startServer(t, nc, pool, cfg)
		client := newClient(t, nc, 30*time.Second)

		release := holdLedger(t, url)
		first := ask(client)
		waitInFlight(t, cfg.Metrics, 1)
		began := time.Now()
		if _, err := client.QuotaBase(context.Background(), "acct_1", start, start.AddDate(0, 1, 0)); !errors.Is(err, quotabase.ErrBusy) {
			t.Fatalf("second request: err = %v, want ErrBusy", err)
		}
		if d := time.Since(began); d > 2*time.Second {
			t.Errorf("busy took %v: it waited", d)
		}
		release()
		if err := <-first; err != nil {
			t.Fatalf("first request, once the ledger is free: %v", err)
		}
		if got := testutil.ToFloat64(cfg.Metrics.Requests.WithLabelValues(quotabase.ResultBusy)); got != 1 {
			t.Errorf("requests{result=busy} = %v, want 1", got)
		}
	})
	t.Run("statement timeout", func(t *testing.T) {
		cfg := quotabase.DefaultConfig()
		cfg.StatementTimeout, cfg.Metrics = 200*time.Millisecond, quotabase.NewMetrics(nil)
		pool := ledgerPool(t, url, cfg)
		nc := connect(t, natsServer(t))
		startServer(t, nc, pool, cfg)
		release := holdLedger(t, url)
		defer release()
		_, err := newClient(t, nc, 30*time.Second).QuotaBase(context.Background(), "acct_1", start, start.AddDate(0, 1, 0))
		if !errors.Is(err, quotabase.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		if got := testutil.ToFloat64(cfg.Metrics.Requests.WithLabelValues(quotabase.ResultError)); got != 1 {
			t.Errorf("requests{result=error} = %v, want 1", got)
		}
	})
	t.Run("stop", func(t *testing.T) {
		cfg := quotabase.DefaultConfig()
		cfg.StatementTimeout, cfg.Metrics = 30*time.Second, quotabase.NewMetrics(nil)
		pool := ledgerPool(t, url, cfg)
		nc := connect(t, natsServer(t))
		srv := startServer(t, nc, pool, cfg)
		release := holdLedger(t, url)
		defer release()
		pending := ask(newClient(t, nc, 30*time.Second))
		waitInFlight(t, cfg.Metrics, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-pending; !errors.Is(err, quotabase.ErrUnavailable) {
			t.Fatalf("the request Stop cancelled: err = %v, want ErrUnavailable", err)
		}
		_, err := newClient(t, nc, 5*time.Second).QuotaBase(context.Background(), "acct_1", start, start.AddDate(0, 1, 0))
		if !errors.Is(err, quotabase.ErrNoReconciler) {
			t.Fatalf("after Stop: err = %v, want ErrNoReconciler", err)
		}
	})
}

// A Postgres that is down is answered with an error at once, not a hang,
// and the Server answers again when it is back.
func TestPostgresDown(t *testing.T) {
	pg := testserver.StartPostgres(t)
	url := pg.NewDatabase(t)
	cfg := quotabase.DefaultConfig()
	cfg.Metrics = quotabase.NewMetrics(nil)
	pool := ledgerPool(t, url, cfg)
	write(t, writerPool(t, url), []ledger.Report{report("acct_1", "eu", "eu-1@a", utc("2026-11-02T00:00:00Z"), 9, 0, 0)})
	nc := connect(t, natsServer(t))
	startServer(t, nc, pool, cfg)
	client := newClient(t, nc, 30*time.Second)
	start := utc("2026-11-01T00:00:00Z")
	base := func() (int64, error) {
		b, err := client.QuotaBase(context.Background(), "acct_1", start, start.AddDate(0, 1, 0))
		return b.Total, err
	}
	if total, err := base(); err != nil || total != 9 {
		t.Fatalf("before: %d, %v", total, err)
	}
	// The server runs with synchronous_commit off and stops as in a crash:
	// a checkpoint keeps the row through it.
	if _, err := writerPool(t, url).Exec(context.Background(), "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	pg.Stop()
	for i := range 3 { // the pool's idle connections are broken, then refused
		began := time.Now()
		if _, err := base(); !errors.Is(err, quotabase.ErrUnavailable) {
			t.Fatalf("request %d with Postgres down: err = %v, want ErrUnavailable", i, err)
		}
		if d := time.Since(began); d > cfg.StatementTimeout+time.Second {
			t.Errorf("request %d with Postgres down took %v", i, d)
		}
	}
	pg.Start(t)
	testserver.WaitFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if total, err := base(); err != nil || total != 9 {
			return fmt.Errorf("after Postgres is back: %d, %v", total, err)
		}
		return nil
	})
}

// Config and ClientConfig refuse bad fields, naming each.
func TestConfigValidation(t *testing.T) {
	cfg := quotabase.Config{Subject: "quota.>", Queue: "a b", StatementTimeout: 0, MaxConcurrent: 0}
	_, poolErr := pgledger.NewPool("postgres://127.0.0.1/x", cfg)
	_, serverErr := quotabase.NewServer(nil, nil, cfg)
	for _, err := range []error{poolErr, serverErr} {
		for _, field := range []string{"Subject", "Queue", "StatementTimeout", "MaxConcurrent"} {
			if err == nil || !strings.Contains(err.Error(), field+":") {
				t.Errorf("err = %v, want one naming %s", err, field)
			}
		}
	}
	for _, subject := range []string{"", "quota..base", "quota.*", "quota base", ".quota"} {
		if _, err := quotabase.NewClient(nil, quotabase.ClientConfig{Subject: subject, Timeout: time.Second}); err == nil || !strings.Contains(err.Error(), "Subject") {
			t.Errorf("subject %q: err = %v", subject, err)
		}
	}
}
