package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// TestCommandLine: --help and --version exit 0; an argument that is not
// a flag exits 2 and lists the ways to run the daemon.
func TestCommandLine(t *testing.T) {
	listsCommands := func(s string) bool {
		return strings.Contains(s, "regional-limiter [flags]") && strings.Contains(s, "regional-limiter --version")
	}
	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr func(string) bool
	}{
		{"--help", []string{"--help"}, 0, nil, listsCommands},
		{"-h", []string{"-h"}, 0, nil, listsCommands},
		{"help", []string{"help"}, 0, listsCommands, nil},
		{"--version", []string{"--version"}, 0, func(s string) bool {
			return strings.HasPrefix(s, "regional-limiter ") && strings.Contains(s, "commit")
		}, nil},
		{"unknown command", []string{"serve"}, 2, nil, func(s string) bool {
			return strings.Contains(s, `unexpected arguments ["serve"]`) && listsCommands(s)
		}},
		{"bad flag", []string{"--no-such-flag"}, 2, nil, func(s string) bool { return strings.Contains(s, "no-such-flag") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			if tt.stdout != nil && !tt.stdout(stdout.String()) {
				t.Errorf("stdout:\n%s", stdout.String())
			}
			if tt.stderr != nil && !tt.stderr(stderr.String()) {
				t.Errorf("stderr:\n%s", stderr.String())
			}
		})
	}
}

// TestStopsCleanlyOnSIGINT: Ctrl-C stops the daemon on its shutdown
// delay, with exit status 0, logging nothing above info from the signal
// on, and its durations as text.
func TestStopsCleanlyOnSIGINT(t *testing.T) {
	listen := fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	setQuotaEnv(t, nil)
	args := []string{"--listen", listen, "--memberlist-bind", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--shutdown-delay", "100ms", "--region", "eu", "--process-id", "p1"}
	var logs testserver.LogBuffer
	done := make(chan int, 1)
	go func() { done <- run(args, io.Discard, &logs) }()
	testserver.WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
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
	started := len(logs.String())
	// run listens for SIGINT from before it starts, so the signal reaches
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
		t.Fatalf("still running 30s after SIGINT; log:\n%s", logs.String())
	}
	drained := false
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(logs.String()[started:])), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if lvl := rec["level"]; lvl != "INFO" && lvl != "DEBUG" {
			t.Errorf("a normal stop logged at %v: %s", lvl, line)
		}
		if d, ok := rec["shutdown_delay"]; ok {
			drained = true
			if d != "100ms" {
				t.Errorf("shutdown_delay logged as %v (%T), want \"100ms\"", d, d)
			}
		}
	}
	if !drained {
		t.Fatalf("no log line with shutdown_delay after the signal:\n%s", logs.String()[started:])
	}
}

// TestMakeRunStopsAtOnce: `make run` runs the daemon itself (go run would
// exit 1 on Ctrl-C whatever the daemon's status) with no shutdown delay,
// which only a fleet behind a load balancer needs.
func TestMakeRunStopsAtOnce(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	out, err := exec.Command("make", "-s", "-n", "-C", "../..", "run").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	recipe := string(out)
	if strings.Contains(recipe, "go run") || !strings.Contains(recipe, "exec ") || !strings.Contains(recipe, "--shutdown-delay 0s") {
		t.Fatalf("make run's recipe:\n%s\nwant the daemon exec'd with --shutdown-delay 0s, not under go run", recipe)
	}
}
