package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/migrations"
)

// runMain runs the command line args as main does, within a deadline
// (a command that starts serving instead of refusing fails the test), and
// returns the exit status and what it printed.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut testserver.LogBuffer
	done := make(chan int, 1)
	go func() { done <- exitCode(run(args, &out, &errOut), &errOut) }()
	select {
	case code = <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("reconciler %q still running after 15s; stderr:\n%s", args, errOut.String())
	}
	return code, out.String(), errOut.String()
}

// TestCommandLine: the reconciler runs only a command it is given: with
// none or an unknown one it lists its commands and exits 2 without
// touching NATS; --help and --version exit 0.
func TestCommandLine(t *testing.T) {
	srv := testserver.StartNATS(t)
	// What a bare `reconciler` would have served on, were it to guess.
	setQuotaEnv(t, map[string]string{"QUOTA_NATS": srv.URL, "QUOTA_LISTEN": fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))})
	listsCommands := func(s string) bool {
		for _, c := range commands {
			if !strings.Contains(s, "  "+c.name+" ") {
				return false
			}
		}
		return strings.Contains(s, "Commands:")
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     func(string) bool
		stderr     func(string) bool
		wantStderr string
	}{
		{"no command", nil, 2, nil, listsCommands, "no command given"},
		{"unknown command", []string{"bogus"}, 2, nil, listsCommands, `unknown command "bogus"`},
		{"flag without a command", []string{"--nats", srv.URL}, 2, nil, listsCommands, `unknown command "--nats"`},
		{"--help", []string{"--help"}, 0, listsCommands, nil, ""},
		{"-h", []string{"-h"}, 0, listsCommands, nil, ""},
		{"help", []string{"help"}, 0, listsCommands, nil, ""},
		{"serve --help", []string{"serve", "--help"}, 0, nil, func(s string) bool { return strings.Contains(s, "Usage: reconciler serve") }, ""},
		{"stripe-sync --help", []string{"stripe-sync", "-h"}, 0, nil, func(s string) bool { return strings.Contains(s, "Usage: reconciler stripe-sync") }, ""},
		{"--version", []string{"--version"}, 0, func(s string) bool {
			return strings.HasPrefix(s, "reconciler ") && strings.Contains(s, "commit") && strings.HasSuffix(s, "\n")
		}, nil, ""},
		{"argument after a command", []string{"serve", "extra"}, 2, nil, nil, `unexpected arguments ["extra"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if tt.stdout != nil && !tt.stdout(stdout) {
				t.Errorf("stdout:\n%s", stdout)
			}
			if tt.stderr != nil && !tt.stderr(stderr) {
				t.Errorf("stderr:\n%s", stderr)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, stderr)
			}
		})
	}
	if names := streamNames(t, srv.URL); len(names) != 0 {
		t.Fatalf("streams on NATS after the refused commands: %v; want none", names)
	}
}

// streamNames lists the JetStream streams on the server at url.
func streamNames(t *testing.T, url string) []string {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := js.StreamNames(ctx)
	var names []string
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestServeNeedsMigratedSchema: serve on a database never migrated, or
// migrated to an older version, is not ready and says, in /readyz and in
// its log, to run `reconciler migrate`; once that ran, it is ready.
func TestServeNeedsMigratedSchema(t *testing.T) {
	tests := []struct {
		name    string
		migrate func(t *testing.T, db string) // before serve starts
	}{
		{"never migrated", func(*testing.T, string) {}},
		{"older schema", func(t *testing.T, db string) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.LoadMigrations(migrations.FS); err != nil {
				t.Fatal(err)
			}
			if err := m.MigrateTo(ctx, migrations.Latest()-1); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testserver.NewDatabase(t)
			tt.migrate(t, db)
			o := defaultOptions()
			o.NATS = testserver.StartNATS(t).URL
			o.Postgres = db
			o.Listen = fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
			o.ShutdownDelay = 0
			var logs testserver.LogBuffer
			log, err := edge.NewLogger(&logs, "info")
			if err != nil {
				t.Fatal(err)
			}
			app := fx.New(serveModule(o, log))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := app.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer app.Stop(ctx)
			readyz := func() (int, string, error) {
				resp, err := http.Get("http://" + o.Listen + "/readyz")
				if err != nil {
					return 0, "", err
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body), err
			}
			testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
				code, body, err := readyz()
				if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "run `reconciler migrate`") {
					return fmt.Errorf("/readyz: %d %q %v, want 503 naming reconciler migrate", code, body, err)
				}
				if !strings.Contains(logs.String(), "run `reconciler migrate`") {
					return fmt.Errorf("log does not say to migrate:\n%s", logs.String())
				}
				return nil
			})
			if code, _, _ := runMain(t, "migrate", "--postgres", db); code != 0 {
				t.Fatalf("migrate: exit status %d", code)
			}
			testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
				if code, body, err := readyz(); err != nil || code != http.StatusOK {
					return fmt.Errorf("/readyz after migrate: %d %q %v", code, body, err)
				}
				return nil
			})
		})
	}
}

// TestServeStopsCleanly: serve stopped by SIGINT (Ctrl-C) exits 0 and, in
// its whole run, logs nothing above info; durations log as text.
func TestServeStopsCleanly(t *testing.T) {
	db := ledgertest.MigratedDatabase(t)
	listen := fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	setQuotaEnv(t, map[string]string{"QUOTA_NATS": testserver.StartNATS(t).URL, "QUOTA_POSTGRES": db, "QUOTA_LISTEN": listen,
		"QUOTA_SHUTDOWN_DELAY": "150ms", "QUOTA_BILLING_TOKEN": "aaaaaaaaaaaaaaaa"})
	var logs testserver.LogBuffer
	done := make(chan int, 1)
	// No catalogue bucket: no control plane created one for the mirror.
	go func() { done <- exitCode(run([]string{"serve", "--catalog-bucket="}, io.Discard, &logs), &logs) }()
	testserver.WaitFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	// run listens for SIGINT from before it serves, so the signal reaches
	// it and not the test binary's default handler.
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit status %d after SIGINT, want 0; log:\n%s", code, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30s after SIGINT; log:\n%s", logs.String())
	}
	drained := false
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(logs.String())), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if lvl := rec["level"]; lvl != "INFO" && lvl != "DEBUG" {
			t.Errorf("a normal run and stop logged at %v: %s", lvl, line)
		}
		if d, ok := rec["shutdown_delay"]; ok {
			drained = true
			if d != "150ms" {
				t.Errorf("shutdown_delay logged as %v (%T), want \"150ms\"", d, d)
			}
		}
	}
	if !drained {
		t.Fatalf("no log line with shutdown_delay:\n%s", logs.String())
	}
}

// TestDefaultPortIsItsOwn: the reconciler's default port is none of the
// ports the other processes of a developer's machine take by default, so
// `make run`, `make run-example` and a reconciler run side by side.
func TestDefaultPortIsItsOwn(t *testing.T) {
	taken := map[string]string{
		":8080": "regional-limiter --listen",
		":8081": "regional-limiter --grpc-listen, as docs/migrating.md and cmd/loadtest run it",
		":8083": "examples/weighted-api --listen",
	}
	if got := defaultOptions().Listen; taken[got] != "" || got != ":8082" {
		t.Fatalf("default --listen %s, want :8082 (%s is %s)", got, got, taken[got])
	}
}
