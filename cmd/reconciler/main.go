// Command reconciler moves usage reports from JetStream into the Postgres
// ledger and answers billing queries. `reconciler help` lists its
// subcommands (the commands table in commands.go), each with a one-line
// summary; `reconciler help COMMAND` or `reconciler COMMAND --help` prints
// a subcommand's flags, each declared once in settings.go, and
// docs/configuration.md holds them as tables generated from those
// declarations. There is no default command: without one, or with one it
// does not know, it lists its commands and exits 2; --version prints its
// build.
//
//	reconciler serve [flags]   consume reports, serve /v1/usage, /metrics, /healthz, /readyz,
//	                           answer quota-base requests on NATS (--quota-base-subject, default quota.base),
//	                           mirror the catalogue's plans into the ledger (--catalog-bucket, default quota-catalog)
//
// GET /v1/usage needs a bearer token from --billing-token (the routes
// table in app.go says who may call each route); without one it answers
// 503. The usage subcommand reads Postgres directly with --postgres's
// credentials. serve is not ready (/readyz) until the ledger's schema is at
// this binary's version (`reconciler migrate`). On SIGTERM or SIGINT, serve
// fails /readyz, keeps serving for --shutdown-delay, then stops and exits 0.
//
// Every flag also reads env QUOTA_<FLAG>, upper case with dashes as
// underscores (e.g. QUOTA_NATS, QUOTA_POSTGRES, QUOTA_BATCH_INTERVAL); a flag
// on the command line wins, then the environment, then the default. An empty
// variable counts as unset. There is no config file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/buildinfo"
	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/migrations"
)

func main() {
	os.Exit(exitCode(run(os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitCode is the process's exit status for run's error, which it prints
// to stderr: 0 for none or for a --help that was asked for, 2 otherwise.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case !errors.Is(err, errUsagePrinted):
		fmt.Fprintln(stderr, "reconciler:", err)
	}
	return 2
}

// errUsagePrinted is run's error once it has printed why to stderr.
var errUsagePrinted = errors.New("usage printed")

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		// No default command: serve would connect to whatever NATS and
		// Postgres answer on the default addresses and create a stream.
		fmt.Fprint(stderr, "reconciler: no command given\n\n")
		printCommands(stderr)
		return errUsagePrinted
	}
	switch args[0] {
	case "help":
		return help(args[1:], stdout)
	case "-h", "-help", "--help":
		printCommands(stdout)
		return nil
	case "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.Line("reconciler"))
		return nil
	}
	if cmd, rest, ok := stripeSubcommand(args); ok {
		return stripeCmd(cmd, rest, stdout, stderr)
	}
	if isFinanceCommand(args[0]) {
		return financeCmd(args[0], args[1:], stdout, stderr)
	}
	cmd := args[0]
	if _, ok := lookupCommand(cmd); !ok {
		fmt.Fprintf(stderr, "reconciler: unknown command %q\n\n", cmd)
		printCommands(stderr)
		return errUsagePrinted
	}
	o, err := parseFlags(cmd, args[1:], stderr)
	if err != nil {
		return err
	}
	ctx, stop, log, err := startCommand(stderr, o.LogLevel)
	if err != nil {
		return err
	}
	defer stop()
	switch cmd {
	case "migrate":
		v, err := migrations.Migrate(ctx, o.Postgres)
		if err != nil {
			return err
		}
		log.Info("ledger schema migrated", "version", v, "postgres", redact(o.Postgres))
		return nil
	case "usage":
		return usage(ctx, o, stdout)
	case "retention":
		return retention(ctx, o, stdout, log)
	case "export":
		return exportCmd(ctx, o, stdout)
	case "events":
		return events(ctx, o, log)
	case "sinks-report":
		return sinksReport(ctx, o, stdout)
	case "stream-migrate":
		return streamMigrate(ctx, o, stdout, log)
	}
	log.Info("reconciler starting", "nats", redact(o.NATS), "postgres", redact(o.Postgres), "listen", o.Listen)
	app := fx.New(serveModule(o, log))
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	<-ctx.Done()
	// The HTTP server drains for --shutdown-delay first; then the
	// reconciler, the pools and NATS get 30 s to stop.
	stopCtx, cancelStop := context.WithTimeout(context.Background(), o.ShutdownDelay+30*time.Second)
	defer cancelStop()
	return app.Stop(stopCtx)
}

// queryField is the flag that gives a billing query's field (the usage
// commands take as flags what GET /v1/usage takes as query parameters).
func (o *options) queryField(name string) string {
	switch name {
	case "key":
		return o.Key
	case "from":
		return o.From
	case "to":
		return o.To
	case "granularity":
		return o.Granularity
	case "at":
		return o.At
	}
	return ""
}

// flagError names the flag of a query field that billing refused (a
// billing.FieldError), as the usage commands take their fields as flags.
func flagError(err error) error {
	var fe *billing.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("--%s: %w", fe.Field, fe.Err)
	}
	return err
}

// usage prints one key's usage, as GET /v1/usage does. It reads Postgres
// directly, not through the HTTP API: the credentials in --postgres are its
// authorization, and no billing token applies. It keeps the API's limits
// (--billing-statement-timeout, --billing-max-rows) and reads through a
// read-only billing pool.
func usage(ctx context.Context, o options, stdout io.Writer) error {
	if o.Quotas {
		return usageQuotas(ctx, o, stdout, time.Now())
	}
	q, err := billing.ParseQuery(o.queryField)
	if err != nil {
		return flagError(err)
	}
	l, closeLedger, err := o.openBillingLedger()
	if err != nil {
		return err
	}
	defer closeLedger()
	res, err := l.Usage(ctx, q)
	if err != nil {
		return flagError(err)
	}
	if o.Format == "csv" {
		return billing.WriteCSV(stdout, res)
	}
	return billing.WriteJSON(stdout, res)
}

// usageQuotas prints each quota of --key's plan in the period that holds
// --at (default now), as GET /v1/usage/quotas does, straight from Postgres
// through a one-connection read-only billing pool.
func usageQuotas(ctx context.Context, o options, stdout io.Writer, now time.Time) error {
	q, err := billing.ParseQuotaQuery(o.queryField, now)
	if err != nil {
		return flagError(err)
	}
	l, closeLedger, err := o.openBillingLedger()
	if err != nil {
		return err
	}
	defer closeLedger()
	res, err := l.Quotas(ctx, q)
	if err != nil {
		return err
	}
	switch o.Format {
	case "csv":
		return billing.WriteQuotasCSV(stdout, res)
	case "text":
		return billing.WriteQuotasText(stdout, res)
	}
	return billing.WriteQuotasJSON(stdout, res)
}

// openBillingLedger opens the billing ledger on --postgres through a
// one-connection read-only pool, for the commands that read it once; the
// returned function closes the pool.
func (o options) openBillingLedger() (*billing.Ledger, func(), error) {
	cfg := o.billingConfig()
	cfg.MaxConns = 1
	pool, err := billing.NewPool(o.Postgres, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	l, err := billing.NewLedger(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return l, pool.Close, nil
}

// startCommand is how every subcommand starts: its logger at level, and a
// context that SIGINT and SIGTERM cancel (stop releases the signals).
func startCommand(stderr io.Writer, level string) (context.Context, context.CancelFunc, *slog.Logger, error) {
	log, err := edge.NewLogger(stderr, level)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return ctx, stop, log, nil
}
