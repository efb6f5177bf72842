package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterbourgon/ff/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/clock"
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
	ecfg.StatementTimeout = o.Billing.StatementTimeout
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

// checkSinkRun checks --month against --continuous (declareSinkRun checks
// each flag alone).
func (o *options) checkSinkRun() []error {
	if o.Continuous && o.Month != "" {
		return []error{errors.New("--month: not with --continuous, whose passes cover the current month (and --lookback)")}
	}
	return nil
}

// passRange is the periods a run covers: --month, or for a --continuous
// pass at now the current UTC month up to the current period of g (the
// publisher adds --lookback before it).
func (o *options) passRange(g export.Granularity, now time.Time) (from, to time.Time) {
	if !o.Continuous {
		from, to, _ = o.month()
		return from, to
	}
	g, _ = export.ParseGranularity(string(g))
	return export.Month.Start(now), g.Next(g.Start(now))
}

// passes runs pass once, or with --continuous every --every until ctx is
// cancelled (SIGTERM; the pass in flight is cancelled with it). A failed
// continuous pass is logged and the next one tries again (a refused event
// is re-sent first, unchanged). clk paces the passes and says when each
// runs.
func passes(ctx context.Context, o options, clk clock.Clock, log *slog.Logger, pass func(ctx context.Context, now time.Time) error) error {
	if !o.Continuous {
		return pass(ctx, clk.Now())
	}
	tick := clk.NewTicker(o.Every)
	defer tick.Stop()
	for {
		if err := pass(ctx, clk.Now()); err != nil && ctx.Err() == nil {
			log.Warn("sink pass failed; the next pass tries again", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}

// events sends --month's closed periods (or, --continuous, the current
// month's as they settle) to --sink (sink.Publisher) and writes
// --metrics-file after each run.
func events(ctx context.Context, o options, log *slog.Logger) error {
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
		nc, js, err := connectJetStream(o, log)
		if err != nil {
			return err
		}
		defer nc.Close()
		if sender, err = sink.NewNATS(js, target); err != nil {
			return err
		}
	} else if sender, err = sink.NewHTTP(target, 10*time.Second); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	g := export.Granularity(o.Granularity)
	clk := clock.System()
	p, err := sink.NewPublisher(pool, ex, sender, sink.Config{Sink: o.sinkName(), Granularity: g,
		Calendar: export.Calendar(o.Calendar), Metrics: sink.NewMetrics(reg), Logger: log, Lookback: o.Lookback, Clock: clk,
		Incremental: o.Continuous})
	if err != nil {
		return err
	}
	return passes(ctx, o, clk, log, func(ctx context.Context, now time.Time) error {
		from, to := o.passRange(g, now)
		st, runErr := p.Run(ctx, from, to, now)
		log.Info("usage events run", "sink", o.sinkName(), "from", from, "to", to, "sent", st.Sent, "corrections", st.Corrections,
			"resent", st.Resent, "unchanged", st.Unchanged, "retained", st.Retained, "requests", st.Requests, "open", st.Open, "held", len(st.Held), "held_total", st.HeldTotal,
			"unsent", st.Unsent, "keys_differing", st.KeysDiffering, "abs_difference", st.AbsDifference)
		if o.MetricsFile != "" {
			if err := prometheus.WriteToTextfile(o.MetricsFile, reg); err != nil {
				return errors.Join(runErr, fmt.Errorf("--metrics-file: %w", err))
			}
		}
		return runErr
	})
}

// sinksReport prints, per sink and period of --month, the ledger's billed
// figure against what the sink acknowledged, as CSV; then each key and
// period whose figures differ (sink.KeyDifferences), so that one key's
// surplus cannot hide another's missing usage.
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
	g, cal, now := export.Granularity(o.Granularity), export.Calendar(o.Calendar), time.Now()
	rows, err := sink.Report(ctx, pool, name, g, cal, from, to, now)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "sink,period_start,ledger_billed,closed_billed,acked_billed,difference,unacked_keys")
	var sinks []string
	for _, r := range rows {
		if len(sinks) == 0 || sinks[len(sinks)-1] != r.Sink {
			sinks = append(sinks, r.Sink)
		}
		if _, err := fmt.Fprintf(stdout, "%s,%s,%d,%d,%d,%d,%d\n", r.Sink, r.PeriodStart.Format(time.RFC3339),
			r.Ledger, r.Closed, r.Acked, r.Difference(), r.Unacked); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "\nsink,key,period_start,ledger_billed,acked_billed,difference,complete,status")
	for _, s := range sinks {
		ds, err := sink.KeyDifferences(ctx, pool, s, g, cal, from, to, now)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if _, err := fmt.Fprintf(stdout, "%s,%s,%s,%d,%d,%d,%t,%s\n", s, d.Key, d.PeriodStart.Format(time.RFC3339),
				d.Ledger, d.Acked, d.Difference(), d.Complete, d.Status); err != nil {
				return err
			}
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
	From     string // stripe-customer set --from, RFC 3339: the mapping's first instant ("" every period)
	// --finalization-grace: how long after an invoice period Stripe
	// finalizes its invoice (the account's setting)
	FinalizationGrace time.Duration
	AnchorDay         int           // --anchor-day 1–31; 0 with "" --time-zone: the UTC month
	TimeZone          string        // --time-zone, IANA
	StripeBatch       int           // --stripe-batch: events per v2 stream request; 1: v1, one each
	SettleAfter       time.Duration // --settle-after: an ambiguous attempt's age before the summaries decide it
	EventID           string        // stripe-settle --event-id
	Outcome           string        // stripe-settle --outcome delivered|missing
}

// stripeSubcommand recognises stripe-sync, stripe-settle and
// stripe-customer set|list.
func stripeSubcommand(args []string) (cmd string, rest []string, ok bool) {
	switch {
	case len(args) > 0 && (args[0] == "stripe-sync" || args[0] == "stripe-settle"):
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
	o := stripeOptions{options: defaultOptions(), KeyEnv: defaultStripeKeyEnv}
	if cmd == "stripe-customer" {
		return o, errors.New("stripe-customer: want set or list")
	}
	s, ok := commandSettings(cmd, &o)
	if !ok {
		return o, fmt.Errorf("no command %q; reconciler help lists them", cmd)
	}
	fs := s.FlagSet()
	fs.SetOutput(stderr)
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix(envPrefix)); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// commandSettings checks each flag alone; these involve several.
	errs := []error{s.Check()}
	switch cmd {
	case "stripe-sync":
		if !o.Continuous {
			_, _, err := o.month()
			if err != nil {
				errs = append(errs, fmt.Errorf("--month: %v", err))
			}
		}
		errs = append(errs, o.checkSinkRun()...)
	case "stripe-customer set":
		if (o.AnchorDay == 0) != (o.TimeZone == "") {
			errs = append(errs, errors.New("--anchor-day, --time-zone: give both or neither"))
		}
	}
	return o, errors.Join(errs...)
}

// stripeCmd runs a Stripe subcommand.
func stripeCmd(cmd string, args []string, stdout, stderr io.Writer) error {
	o, err := parseStripeFlags(cmd, args, stderr)
	if err != nil {
		return err
	}
	ctx, stop, log, err := startCommand(stderr, o.LogLevel)
	if err != nil {
		return err
	}
	defer stop()
	switch cmd {
	case "stripe-sync":
		return stripeSync(ctx, o, stdout, log)
	case "stripe-settle":
		pool, err := pgxpool.New(ctx, o.Postgres)
		if err != nil {
			return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
		}
		defer pool.Close()
		if err := sink.SettleHeld(ctx, pool, sink.StripeSinkName(o.Meter), o.EventID, o.Outcome == "delivered", time.Now()); err != nil {
			return fmt.Errorf("--event-id: %w", err)
		}
		log.Info("held meter event settled", "event_id", o.EventID, "outcome", o.Outcome)
		return nil
	case "stripe-customer set":
		pool, err := pgxpool.New(ctx, o.Postgres)
		if err != nil {
			return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
		}
		defer pool.Close()
		var from time.Time
		if o.From != "" {
			from, _ = time.Parse(time.RFC3339, o.From) // checked by its flag
		}
		if err := sink.SetStripeCustomerFrom(ctx, pool, o.Key, o.Customer, from); err != nil {
			if errors.Is(err, sink.ErrBadCustomer) {
				return fmt.Errorf("--customer: %w", err)
			}
			return err
		}
		if err := sink.SetStripeAnchor(ctx, pool, o.Key, sink.Anchor{Day: o.AnchorDay, TimeZone: o.TimeZone}); err != nil {
			return fmt.Errorf("--anchor-day, --time-zone: %w", err)
		}
		log.Info("stripe customer set", "customer", o.Customer, "from", o.From, "anchor_day", o.AnchorDay, "time_zone", o.TimeZone)
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
	fmt.Fprintln(stdout, "key,stripe_customer_id,updated_at,anchor_day,time_zone")
	for _, c := range cs {
		zone := ""
		if c.TimeZone != nil {
			zone = c.TimeZone.String()
		}
		if _, err := fmt.Fprintf(stdout, "%s,%s,%s,%d,%s\n", c.Key, c.CustomerID, c.UpdatedAt.Format(time.RFC3339), c.AnchorDay,
			zone); err != nil {
			return err
		}
	}
	return nil
}

// stripeSync sends --month's closed periods (or, --continuous, the
// current month's as they settle) of mapped keys to the Stripe meter
// --meter (sink.SyncStripe), prints the events held past Stripe's dedupe
// window as CSV for a person, and writes --metrics-file. The secret key
// comes from the environment and goes only into the Authorization header.
func stripeSync(ctx context.Context, o stripeOptions, stdout io.Writer, log *slog.Logger) error {
	secret := os.Getenv(o.KeyEnv)
	if secret == "" {
		return fmt.Errorf("--stripe-key-env: environment variable %s is empty or unset", o.KeyEnv)
	}
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
	clk := clock.System()
	cfg := sink.StripeConfig{Meter: o.Meter, Granularity: g, FinalizationGrace: o.FinalizationGrace, Lookback: o.Lookback,
		Calendar: export.Calendar(o.Calendar), Metrics: sink.NewMetrics(reg), Logger: log, Clock: clk,
		Summaries: sink.NewStripeSummaries(client, o.Meter), Incremental: o.Continuous, SettleAfter: o.SettleAfter}
	if o.StripeBatch > 1 {
		cfg.Stream, cfg.BatchSize = sink.NewStripeStream(secret, o.URL, nil, clk), o.StripeBatch
	}
	return passes(ctx, o.options, clk, log, func(ctx context.Context, now time.Time) error {
		from, to := o.passRange(g, now)
		st, runErr := sink.SyncStripe(ctx, pool, ex, client.V1BillingMeterEvents, cfg, from, to, now)
		log.Info("stripe sync run", "sink", sink.StripeSinkName(o.Meter), "from", from, "to", to, "sent", st.Sent,
			"corrections", st.Corrections, "resent", st.Resent, "restamped", st.Restamped, "settled", st.Settled,
			"unsettled", st.Unsettled, "unchanged", st.Unchanged, "retained", st.Retained, "requests", st.Requests,
			"open", st.Open, "unmapped_keys", st.UnmappedKeys, "held", len(st.Held), "held_total", st.HeldTotal,
			"unsent", st.Unsent, "keys_differing", st.KeysDiffering, "abs_difference", st.AbsDifference)
		if len(st.Held) > 0 {
			log.Warn("meter events are held, not re-sent (unacknowledged past Stripe's 24h dedupe window, or maybe "+
				"delivered for an invoice since finalized): check Stripe's meter event summaries and settle them (listed on stdout)",
				"count", len(st.Held))
			fmt.Fprintln(stdout, "key,period_start,granularity,event_id,revision,billed,acked,first_attempt")
			for _, h := range st.Held {
				fmt.Fprintf(stdout, "%s,%s,%s,%s,%d,%d,%d,%s\n", h.Key, h.PeriodStart.Format(time.RFC3339), g, h.EventID,
					h.Revision, h.Billed, h.Acked, h.FirstAttempt.Format(time.RFC3339))
			}
		}
		if o.MetricsFile != "" {
			if err := prometheus.WriteToTextfile(o.MetricsFile, reg); err != nil {
				return errors.Join(runErr, fmt.Errorf("--metrics-file: %w", err))
			}
		}
		return runErr
	})
}
