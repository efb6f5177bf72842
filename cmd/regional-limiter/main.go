// Command regional-limiter is the regional rate limiter daemon: the check
// API (/v1/allow), the control plane (/v1/limits, /v1/keys, /v1/costs),
// metrics and health, over a region.Limiter whose store is Redis (--redis)
// or in process, and whose plan catalogue is pushed over NATS JetStream
// (--nats, or an embedded server). The route table in server.go says who
// may call each route (--check-token, --read-token, --admin-token). On
// SIGTERM or SIGINT it fails /readyz, keeps serving for --shutdown-delay,
// then stops and exits 0; --version prints its build.
// Its settings are declared once in settings.go; `regional-limiter help`
// (or --help) lists them, and README.md in this directory tables them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/buildinfo"
	"github.com/quotaplatform/quota/internal/settings"
)

// defaultGCPercent is --gc-percent's default. At 5,000 single checks/s
// over 10,000 keys (docs/performance.md, tail latency) it took the
// daemon's p99 from 4.5–5.8 ms to 3.3–3.4 ms and its p99.9 from 19–25 ms
// to 8–11 ms against Go's 100, for a heap that may grow to 5× its live
// size between collections (bounded by GOMEMLIMIT, which the Terraform
// deploy sets).
const defaultGCPercent = 400

// applyGCPercent sets the garbage collector's percent to pct unless GOGC
// is in the environment (an operator's setting wins), and reports whether
// it did.
func applyGCPercent(pct int) bool {
	if _, set := os.LookupEnv("GOGC"); set {
		return false
	}
	debug.SetGCPercent(pct)
	return true
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run runs the daemon on the command line args until SIGINT or SIGTERM
// and returns the exit status: 0 for --help, --version or a clean stop, 2
// for a bad command line, 1 when the daemon cannot start or stop.
func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && args[0] == "help":
		if err := help(args[1:], stdout); err != nil {
			fmt.Fprintln(stderr, "regional-limiter:", err)
			return 2
		}
		return 0
	case len(args) > 0 && (args[0] == "--version" || args[0] == "-version"):
		fmt.Fprintln(stdout, buildinfo.Line("regional-limiter"))
		return 0
	}
	o, err := parseOptions(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "regional-limiter:", err)
		if errors.Is(err, errUnexpectedArgs) {
			fmt.Fprint(stderr, "\n"+commandsUsage)
		}
		return 2
	}
	// Listen before starting: a signal during the start cancels it (fx
	// stops what had started) instead of killing the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	applyGCPercent(o.GCPercent)
	app := fx.New(appOptions(o, stderr))
	if err := app.Err(); err != nil {
		fmt.Fprintln(stderr, "regional-limiter:", err)
		return 1
	}
	startCtx, cancel := context.WithTimeout(ctx, app.StartTimeout())
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		fmt.Fprintln(stderr, "regional-limiter:", err)
		return 1
	}
	code := 0
	select {
	case <-ctx.Done():
	case sig := <-app.Wait(): // a module asked to shut down (fx.Shutdowner)
		code = sig.ExitCode
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), app.StopTimeout())
	defer cancelStop()
	if err := app.Stop(stopCtx); err != nil {
		fmt.Fprintln(stderr, "regional-limiter:", err)
		return 1
	}
	return code
}

// help prints the usage (what --help prints) to w, or with --markdown the
// settings as the Markdown table of README.md's "Flags".
func help(args []string, w io.Writer) error {
	o := defaultOptions()
	s := declare(&o)
	switch {
	case len(args) == 0:
		printUsage(w, s)
		return nil
	case len(args) == 1 && (args[0] == "--markdown" || args[0] == "-markdown"):
		return s.WriteMarkdown(w)
	}
	return fmt.Errorf("help: want no argument or --markdown, got %q", args)
}

// commandsUsage lists the ways to run the daemon.
const commandsUsage = `Usage:
  regional-limiter [flags]            run the regional rate limiter: the check API, the control plane, metrics
  regional-limiter help [--markdown]  print this help, or with --markdown the settings as a Markdown table
  regional-limiter --version          print the module version and commit it was built from
`

// printUsage prints the commands and every flag of s to w.
func printUsage(w io.Writer, s *settings.Set) {
	fmt.Fprint(w, commandsUsage+`
Every flag also reads QUOTA_<FLAG> from the environment (upper case, dashes
as underscores), and --config names a file of flag = value lines: the
command line wins, then the environment, then the file, then the default
(README.md, "Flags").

Flags:
`)
	fs := s.FlagSet()
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}
