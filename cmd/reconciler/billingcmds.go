package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/peterbourgon/ff/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// exporter returns an export.Exporter on a one-connection read-only
// billing pool, each page's query bounded by --billing-statement-timeout.
func exporter(o options) (*export.Exporter, *pgxpool.Pool, error) {
	cfg := o.billingConfig()
	cfg.MaxConns = 1
	pool, err := billing.NewPool(o.Postgres, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	ecfg := export.DefaultConfig()
	ecfg.StatementTimeout = o.BillingStatementTimeout
	ex, err := export.New(pool, ecfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return ex, pool, nil
}

// exportCmd prints every key's usage per period that starts in --month
// (on --calendar), as GET /v1/usage/export does, straight from Postgres (its --postgres
// credentials are its authorization).
func exportCmd(ctx context.Context, o options, stdout io.Writer) error {
	from, to, _ := o.month()
	ex, pool, err := exporter(o)
	if err != nil {
		return err
	}
	defer pool.Close()
	g := export.Granularity(o.Granularity)
	enc := export.NewEncoder(stdout, export.Format(o.Format), g)
	q := export.Query{From: from, To: to, Granularity: g, Calendar: export.Calendar(o.Calendar), Now: time.Now()}
	err = ex.Export(ctx, q, enc.Rows)
	if err != nil {
		_ = enc.Fail(err.Error())
		return err
	}
	return enc.End()
}

// events sends --month's closed periods to --sink (sink.Publisher) and
// writes --metrics-file.
func events(ctx context.Context, o options, log *slog.Logger) error {
	from, to, _ := o.month()
	ex, bpool, err := exporter(o)
	if err != nil {
		return err
	}
	defer bpool.Close()
	pool, err := pgxpool.New(ctx, o.Postgres)
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer pool.Close()
	kind, target, _ := o.sinkTarget()
	var sender sink.Sender
	if kind == "nats" {
		opts, err := natsOptions(o, log)
		if err != nil {
			return err
		}
		nc, err := nats.Connect(o.NATS, append(opts, nats.RetryOnFailedConnect(false))...)
		if err != nil {
			return fmt.Errorf("--nats %s: %w", redact(o.NATS), err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("jetstream: %w", err)
		}
		if sender, err = sink.NewNATS(js, target); err != nil {
			return err
		}
	} else if sender, err = sink.NewHTTP(target, 10*time.Second); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	p, err := sink.NewPublisher(pool, ex, sender, sink.Config{Sink: o.sinkName(), Granularity: export.Granularity(o.Granularity),
		Metrics: sink.NewMetrics(reg), Logger: log})
	if err != nil {
		return err
	}
	st, runErr := p.Run(ctx, from, to, time.Now())
	log.Info("usage events run", "sink", o.sinkName(), "month", o.Month, "sent", st.Sent, "corrections", st.Corrections,
		"resent", st.Resent, "unchanged", st.Unchanged, "open", st.Open, "difference", st.Difference)
	if o.MetricsFile != "" {
		if err := prometheus.WriteToTextfile(o.MetricsFile, reg); err != nil {
			return errors.Join(runErr, fmt.Errorf("--metrics-file: %w", err))
		}
	}
	return runErr
}

// sinksReport prints, per sink and period of --month, the ledger's spent
// against what the sink acknowledged, as CSV.
func sinksReport(ctx context.Context, o options, stdout io.Writer) error {
	from, to, _ := o.month()
	pool, err := billing.NewPool(o.Postgres, o.billingConfig())
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer pool.Close()
	name := ""
	if o.Sink != "" {
		name = o.sinkName()
	}
	rows, err := sink.Report(ctx, pool, name, export.Granularity(o.Granularity), from, to, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "sink,period_start,ledger_billed,closed_billed,acked_billed,difference,unacked_keys")
	for _, r := range rows {
		if _, err := fmt.Fprintf(stdout, "%s,%s,%d,%d,%d,%d,%d\n", r.Sink, r.PeriodStart.Format(time.RFC3339),
			r.Ledger, r.Closed, r.Acked, r.Difference(), r.Unacked); err != nil {
			return err
		}
	}
	return nil
}

// stripeOptions are the flags of stripe-sync and stripe-customer, parsed
// apart from options (which they reuse for the shared flags).
type stripeOptions struct {
	options
	Meter    string // --meter, the Stripe meter's event_name
	KeyEnv   string // --stripe-key-env: the variable holding the secret key
	URL      string // --stripe-url: Stripe's API base ("" = Stripe); tests point it at stripe-mock
	Customer string // --customer cus_…
}

// stripeSubcommand recognises stripe-sync and stripe-customer set|list.
func stripeSubcommand(args []string) (cmd string, rest []string, ok bool) {
	switch {
	case len(args) > 0 && args[0] == "stripe-sync":
		return args[0], args[1:], true
	case len(args) > 0 && args[0] == "stripe-customer":
		if len(args) > 1 && (args[1] == "set" || args[1] == "list") {
			return "stripe-customer " + args[1], args[2:], true
		}
		return "stripe-customer", nil, true
	}
	return "", nil, false
}

// parseStripeFlags parses a Stripe subcommand's flags, each also read from
// QUOTA_<FLAG> as parseFlags does. The secret key is never a flag: it is
// read from the variable --stripe-key-env names.
func parseStripeFlags(cmd string, args []string, stderr io.Writer) (stripeOptions, error) {
	o := stripeOptions{options: defaultOptions(), KeyEnv: "QUOTA_STRIPE_KEY"}
	fs := flag.NewFlagSet("reconciler "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Postgres, "postgres", o.Postgres, "Postgres URL (sslmode in the URL, e.g. ?sslmode=verify-full)")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
	switch cmd {
	case "stripe-sync":
		fs.StringVar(&o.Month, "month", "", "the UTC month, e.g. 2026-11 (required)")
		fs.StringVar(&o.Granularity, "granularity", "month", "period: day or month")
		fs.DurationVar(&o.BillingStatementTimeout, "billing-statement-timeout", o.BillingStatementTimeout,
			"longest query of one page of keys")
		fs.StringVar(&o.Meter, "meter", "", "the Stripe meter's event_name (required)")
		fs.StringVar(&o.KeyEnv, "stripe-key-env", o.KeyEnv, "name of the environment variable holding the Stripe secret key")
		fs.StringVar(&o.URL, "stripe-url", "", "Stripe API base URL (empty: Stripe; for tests, a stripe-mock)")
		fs.StringVar(&o.MetricsFile, "metrics-file", "", "write the run's metrics here (Prometheus text format)")
	case "stripe-customer set":
		fs.StringVar(&o.Key, "key", "", "API key (required)")
		fs.StringVar(&o.Customer, "customer", "", "Stripe customer id, cus_… (required)")
	case "stripe-customer list":
	default:
		return o, errors.New("stripe-customer: want set or list")
	}
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix(envPrefix)); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	_, err := url.Parse(o.Postgres)
	check(err == nil && o.Postgres != "", "--postgres: not a URL")
	switch cmd {
	case "stripe-sync":
		_, _, err := o.month()
		check(err == nil, "--month: %v", err)
		check(o.Granularity == "day" || o.Granularity == "month", "--granularity: must be day or month, got %q", o.Granularity)
		check(o.BillingStatementTimeout >= time.Millisecond && o.BillingStatementTimeout <= maxBillingStatementTimeout,
			"--billing-statement-timeout: must be 1ms to %v, got %v", maxBillingStatementTimeout, o.BillingStatementTimeout)
		check(o.Meter != "", "--meter: required")
		check(o.KeyEnv != "", "--stripe-key-env: required")
		u, err := url.Parse(o.URL)
		check(o.URL == "" || (err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil),
			"--stripe-url: want http(s)://HOST[:PORT] without credentials")
	case "stripe-customer set":
		check(o.Key != "", "--key: required")
		check(o.Customer != "", "--customer: required")
	}
	return o, errors.Join(errs...)
}

// stripeCmd runs a Stripe subcommand.
func stripeCmd(cmd string, args []string, stdout, stderr io.Writer) error {
	o, err := parseStripeFlags(cmd, args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(o.LogLevel, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "stripe-sync":
		return stripeSync(ctx, o, stdout, log)
	case "stripe-customer set":
		pool, err := pgxpool.New(ctx, o.Postgres)
		if err != nil {
			return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
		}
		defer pool.Close()
		if err := sink.SetStripeCustomer(ctx, pool, o.Key, o.Customer); err != nil {
			if errors.Is(err, sink.ErrBadCustomer) {
				return fmt.Errorf("--customer: %w", err)
			}
			return err
		}
		log.Info("stripe customer set", "customer", o.Customer)
		return nil
	}
	pool, err := billing.NewPool(o.Postgres, o.billingConfig())
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer pool.Close()
	cs, err := sink.StripeCustomers(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "key,stripe_customer_id,updated_at")
	for _, c := range cs {
		if _, err := fmt.Fprintf(stdout, "%s,%s,%s\n", c.Key, c.CustomerID, c.UpdatedAt.Format(time.RFC3339)); err != nil {
			return err
		}
	}
	return nil
}

// stripeSync sends --month's closed periods of mapped keys to the Stripe
// meter --meter (sink.SyncStripe), prints the periods too old for Stripe
// as CSV for a person, and writes --metrics-file. The secret key comes
// from the environment and goes only into the Authorization header.
func stripeSync(ctx context.Context, o stripeOptions, stdout io.Writer, log *slog.Logger) error {
	secret := os.Getenv(o.KeyEnv)
	if secret == "" {
		return fmt.Errorf("--stripe-key-env: environment variable %s is empty or unset", o.KeyEnv)
	}
	from, to, _ := o.month()
	ex, bpool, err := exporter(o.options)
	if err != nil {
		return err
	}
	defer bpool.Close()
	pool, err := pgxpool.New(ctx, o.Postgres)
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer pool.Close()
	client := sink.NewStripeClient(secret, o.URL, nil)
	reg := prometheus.NewRegistry()
	g := export.Granularity(o.Granularity)
	st, runErr := sink.SyncStripe(ctx, pool, ex, client.V1BillingMeterEvents, sink.StripeConfig{Meter: o.Meter, Granularity: g,
		Metrics: sink.NewMetrics(reg), Logger: log}, from, to, time.Now())
	log.Info("stripe sync run", "sink", sink.StripeSinkName(o.Meter), "month", o.Month, "sent", st.Sent,
		"corrections", st.Corrections, "resent", st.Resent, "unchanged", st.Unchanged, "open", st.Open,
		"unmapped_keys", st.UnmappedKeys, "too_old", len(st.TooOld), "difference", st.Difference)
	if len(st.TooOld) > 0 {
		log.Warn("periods older than Stripe accepts were not sent; bill them by hand (listed on stdout)", "count", len(st.TooOld))
		fmt.Fprintln(stdout, "key,period_start,granularity,ledger_billed,stripe_billed")
		for _, p := range st.TooOld {
			fmt.Fprintf(stdout, "%s,%s,%s,%d,%d\n", p.Key, p.PeriodStart.Format(time.RFC3339), g, p.Billed, p.Held)
		}
	}
	if o.MetricsFile != "" {
		if err := prometheus.WriteToTextfile(o.MetricsFile, reg); err != nil {
			return errors.Join(runErr, fmt.Errorf("--metrics-file: %w", err))
		}
	}
	return runErr
}
