// Command regional-limiter is the regional rate limiter daemon: the check
// API (/v1/allow), the control plane (/v1/limits, /v1/keys, /v1/costs),
// metrics and health, over a region.Limiter whose store is Redis (--redis)
// or in process, and whose plan catalogue is pushed over NATS JetStream
// (--nats, or an embedded server). The route table in server.go says who
// may call each route (--check-token, --read-token, --admin-token). On
// SIGTERM it fails /readyz, keeps serving for --shutdown-delay, then stops.
// Its settings are declared once in settings.go; `regional-limiter help`
// (or --help) lists them, and README.md in this directory tables them.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"go.uber.org/fx"

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

func main() {
	if len(os.Args) > 1 && os.Args[1] == "help" {
		if err := help(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "regional-limiter:", err)
			os.Exit(2)
		}
		return
	}
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "regional-limiter:", err)
		os.Exit(2)
	}
	applyGCPercent(o.GCPercent)
	app := fx.New(appOptions(o, os.Stderr))
	if err := app.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "regional-limiter:", err)
		os.Exit(1)
	}
	app.Run() // until SIGINT or SIGTERM, then a graceful stop
}

// help prints the usage (what --help prints) to w, or with --markdown the
// settings as the Markdown table of README.md's "Flags".
func help(args []string, w io.Writer) error {
	s := declare(new(Options))
	switch {
	case len(args) == 0:
		printUsage(w, s)
		return nil
	case len(args) == 1 && (args[0] == "--markdown" || args[0] == "-markdown"):
		return s.WriteMarkdown(w)
	}
	return fmt.Errorf("help: want no argument or --markdown, got %q", args)
}

// printUsage prints the commands and every flag of s to w.
func printUsage(w io.Writer, s *settings.Set) {
	fmt.Fprint(w, `Usage:
  regional-limiter [flags]            run the regional rate limiter: the check API, the control plane, metrics
  regional-limiter help [--markdown]  print this help, or with --markdown the settings as a Markdown table

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
