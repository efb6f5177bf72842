// Command fleet runs the whole platform on this machine: three regions (eu,
// us, ap), each with its own redis-server, its own nats-server (JetStream
// on, the regions' servers joined by gateways) and two regional-limiter
// processes, plus Postgres, migrated, and the reconciler. It writes a demo
// plan and two keys, prints every URL and a few curl lines to try, and runs
// until Ctrl-C (SIGINT) or SIGTERM, when it stops everything it started.
//
//	make fleet
//	go run ./cmd/fleet [-bin DIR] [-machine-postgres]
//
// The fleet is the multi-region harness's cluster (test/multiregion.Start),
// the one way this project starts several regions, so the fleet and the
// harness's scenarios run the same configuration: the shipped NATS
// configuration with its users and permissions, the cross-region latency
// (80 ms round trip) on every gateway link. Each process's log is under the
// directory the fleet prints; it is removed when the fleet stops.
//
// Needs Go, redis-server, nats-server and the Postgres binaries (Debian
// packages redis-server, nats-server, postgresql); a missing one is named
// with its package.
package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quotaplatform/quota/test/multiregion"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line.
type options struct {
	// bin is a directory holding regional-limiter and reconciler, built
	// beforehand; "" builds them (go build, in the module's directory).
	bin string
	// machinePostgres makes a database on the machine's Postgres
	// (QUOTA_TEST_POSTGRES, default postgres@127.0.0.1:5432), dropped at
	// the end, instead of a private server.
	machinePostgres bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "", "directory holding regional-limiter and reconciler, already built; empty: build them")
	fs.BoolVar(&o.machinePostgres, "machine-postgres", false,
		"use a new database on the machine's Postgres (QUOTA_TEST_POSTGRES, default postgres@127.0.0.1:5432) instead of a private server")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("fleet: unexpected arguments %q", fs.Args())
	}
	return o, nil
}

// run starts the fleet, prints the guide to stdout, and stops everything
// on SIGINT or SIGTERM. Progress and failures go to stderr. It returns the
// exit code.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	// Signals are caught from the start: a Ctrl-C while the fleet starts
	// stops it once the start has returned, and one while it stops does
	// not cut its cleanup short (which would leave Postgres running).
	sigs := make(chan os.Signal, 4) // a few presses of Ctrl-C; more are dropped
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	if o.bin != "" {
		if err := multiregion.UseBinaries(o.bin, "regional-limiter", "reconciler"); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	defer multiregion.RemoveBuilds()

	life, err := newLifetime(stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	spec := fleetSpec(o)
	began := time.Now()
	fmt.Fprintf(stderr, "fleet: starting %d regions (processes' logs in %s)\n", len(spec.Regions), life.Root())

	var f *fleet
	started := make(chan bool, 1) // one send, by the starting goroutine
	go func() {
		started <- life.runGuarded(func() { f = startFleet(life, spec) })
	}()
	ok, interrupted := false, false
	for waiting := true; waiting; {
		select {
		case ok = <-started:
			waiting = false
		case <-sigs:
			if !interrupted {
				fmt.Fprintln(stderr, "fleet: interrupted: stopping once the start returns")
			}
			interrupted = true
		}
	}
	if ok && !interrupted {
		f.printGuide(stdout, time.Since(began))
		<-sigs
	}
	fmt.Fprintln(stderr, "fleet: stopping every process")
	done := make(chan struct{})
	go func() {
		defer close(done)
		life.close()
	}()
	for stopping := true; stopping; {
		select {
		case <-done:
			stopping = false
		case <-sigs:
			fmt.Fprintln(stderr, "fleet: still stopping (Postgres and the servers' shutdown)")
		}
	}
	if !ok || life.Failed() {
		fmt.Fprintln(stderr, "fleet: FAILED (see above)")
		return 1
	}
	fmt.Fprintln(stderr, "fleet: stopped")
	return 0
}

// fleetSpec is the harness's default cluster with a private Postgres (or the
// machine's) and random tokens.
func fleetSpec(o options) multiregion.Spec {
	spec := multiregion.DefaultSpec()
	spec.PrivatePostgres = !o.machinePostgres
	spec.AdminToken = rand.Text()
	spec.BillingToken = rand.Text()
	// A machine that builds or tests beside the fleet (two cores) may take
	// longer than a test run's deadline to elect a JetStream leader.
	spec.StartTimeout = 3 * time.Minute
	return spec
}
