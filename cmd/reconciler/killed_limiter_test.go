package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger/billing"
)

// TestKilledLimiterIsBilledExactly is issue 27's done-when: a limiter
// SIGKILLed mid-window never sends its final report; within --close-after
// (plus a pass and a few seconds) past its window's end, its key's
// /v1/usage is complete and exact: spent equals what the clients were
// allowed. The real cmd/regional-limiter binary reports over a test NATS
// server to this reconciler's serve app, with --close-after 2s and 5 s
// windows.
func TestKilledLimiterIsBilledExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs cmd/regional-limiter")
	}
	const (
		closeAfter = 2 * time.Second
		window     = 5 * time.Second
		slack      = 4 * time.Second // two closer passes (close-after/4 each), the polls, a loaded machine
		token      = "killed-limiter-billing-token"
	)
	bin := filepath.Join(t.TempDir(), "regional-limiter")
	build := exec.Command("go", "build", "-o", bin, "./cmd/regional-limiter")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/regional-limiter: %v\n%s", err, out)
	}

	ctx := context.Background()
	db := ledgertest.MigratedDatabase(t)
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ns := testserver.StartNATS(t)

	o := defaultOptions()
	o.NATS, o.Postgres = ns.URL, db
	o.Listen = fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	o.CloseAfter = closeAfter
	o.BatchInterval = 50 * time.Millisecond
	o.BillingToken = edge.Secret(token)
	o.ShutdownDelay = 0
	var reconLogs testserver.LogBuffer
	app := fx.New(serveModule(o, slog.New(slog.NewTextHandler(&reconLogs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	startCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := app.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	waitOK(t, "http://"+o.Listen+"/readyz")

	limiterAddr := fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	limiter := exec.Command(bin, "--listen", limiterAddr, "--nats", ns.URL, "--data-dir", t.TempDir(),
		"--region", "eu", "--regions", "eu", "--process-id", "eu-killed", "--control-plane",
		"--window", window.String(), "--report-interval", "200ms", "--shutdown-delay", "0s", "--log-level", "warn")
	for _, kv := range os.Environ() { // the limiter reads no QUOTA_* of this test's environment
		if !strings.HasPrefix(kv, envPrefix+"_") {
			limiter.Env = append(limiter.Env, kv)
		}
	}
	var logs bytes.Buffer
	limiter.Stdout, limiter.Stderr = &logs, &logs
	if err := limiter.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = limiter.Process.Kill()
			_ = limiter.Wait()
		}
		if t.Failed() {
			t.Logf("limiter log:\n%s\nreconciler log:\n%s", logs.String(), reconLogs.String())
		}
	}()
	waitOK(t, "http://"+limiterAddr+"/readyz")

	// Spend until the ledger holds every allowed check while the key's
	// window is still open (a window that rolls meanwhile sends its final
	// report: then spend again in the next one).
	key := fmt.Sprintf("acct_killed_%d", time.Now().UnixNano())
	var allowed int64
	for attempt := 0; ; attempt++ {
		if attempt == 5 {
			t.Fatal("every attempt ended with its window closed by the limiter")
		}
		for range 250 {
			if check(t, limiterAddr, key) {
				allowed++
			}
		}
		testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			var spent int64
			if err := pool.QueryRow(ctx, `SELECT coalesce(sum(spent), 0) FROM usage_reports WHERE key = $1`, key).Scan(&spent); err != nil {
				return err
			}
			if spent != allowed {
				return fmt.Errorf("ledger holds %d of %d allowed", spent, allowed)
			}
			return nil
		})
		var open int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_reports WHERE key = $1 AND NOT final`, key).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open > 0 {
			break
		}
	}
	if err := limiter.Process.Kill(); err != nil { // SIGKILL: no final report
		t.Fatal(err)
	}
	_ = limiter.Wait()
	killed = true
	killedAt := time.Now()
	if allowed == 0 {
		t.Fatal("no check was allowed")
	}

	q := url.Values{"key": {key}, "from": {killedAt.Add(-time.Hour).UTC().Format(time.RFC3339)},
		"to": {killedAt.Add(time.Hour).UTC().Format(time.RFC3339)}, "granularity": {"window"}}
	var res billing.Result
	testserver.WaitFor(t, window+closeAfter+slack+5*time.Second, 50*time.Millisecond, func() error {
		req, _ := http.NewRequest(http.MethodGet, "http://"+o.Listen+"/v1/usage?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		res = billing.Result{}
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return fmt.Errorf("%s: %w", resp.Status, err)
		}
		if !res.Complete {
			return fmt.Errorf("/v1/usage not complete: %+v", res)
		}
		return nil
	})
	completeAt := time.Now()
	var windowEnd time.Time
	if err := pool.QueryRow(ctx, `SELECT max(window_end) FROM usage_reports WHERE key = $1`, key).Scan(&windowEnd); err != nil {
		t.Fatal(err)
	}
	t.Logf("allowed %d; killed %v before the window's end; complete %v after it", allowed,
		windowEnd.Sub(killedAt).Round(time.Millisecond), completeAt.Sub(windowEnd).Round(time.Millisecond))
	if res.Totals.Net != allowed || res.ClosedByReconciler < 1 {
		t.Fatalf("/v1/usage net %d, closed_by_reconciler %d; want the %d allowed, at least one window closed",
			res.Totals.Net, res.ClosedByReconciler, allowed)
	}
	if late := completeAt.Sub(windowEnd); late < closeAfter || late > closeAfter+slack {
		t.Fatalf("complete %v after the window's end; want within --close-after %v plus %v", late, closeAfter, slack)
	}
}

// check asks the limiter for one unit of key and says whether it was
// allowed.
func check(t *testing.T, addr, key string) bool {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/allow", "application/json", strings.NewReader(`{"key":"`+key+`","cost":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool `json:"allowed"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&d) != nil {
		t.Fatalf("POST /v1/allow: %s", resp.Status)
	}
	return d.Allowed
}

// waitOK waits for GET url to answer 200.
func waitOK(t *testing.T, url string) {
	t.Helper()
	testserver.WaitFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}
