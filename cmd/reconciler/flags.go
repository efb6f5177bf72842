package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/internal/field"
	"github.com/quotaplatform/quota/internal/settings"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/planmirror"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/ledger/sink"
)

// options are the reconciler's settings from flags and environment.
type options struct {
	NATS     string
	NATSAuth edge.NATSAuth
	Postgres string
	Listen   string
	LogLevel string

	// Stream is the usage stream's configuration (its name, and its
	// replicas, byte limit and placement when this process creates it),
	// checked by ledger.
	Stream ledger.StreamConfig
	// MigrateWait bounds stream-migrate's wait for the reconcilers (--migrate-wait).
	MigrateWait time.Duration
	Durable     string
	// Regions is --regions as given: the regions whose reports this
	// reconciler consumes; empty = every region.
	Regions       string
	BatchSize     int
	BatchInterval time.Duration
	// WriteParallel is the most transactions, on as many Postgres
	// connections, that one batch is written in at once
	// (reconcile.WriterConfig.Parallel).
	WriteParallel int
	// MaxReportAge and MaxReportSkew bound a report's window start to
	// [now − age, now + skew] (reconcile.Config); MaxNewPartitions bounds
	// the partitions one write creates (reconcile.WriterConfig).
	MaxReportAge     time.Duration
	MaxReportSkew    time.Duration
	MaxNewPartitions int
	// RefundHorizon is how far back a refund reaches in its key's history
	// (reconcile.Config.RefundHorizon).
	RefundHorizon time.Duration
	OTLPEndpoint  string // --otlp-endpoint: OTLP/HTTP collector for traces; empty = off
	// QuotaBaseSubject is the NATS subject serve answers quota-base
	// requests on (ledger/quotabase), in queue group quotabase.DefaultQueue.
	QuotaBaseSubject string
	// CloseAfter is how long a process may stay silent past a window's end
	// before serve closes its row for it (reconcile.CloserConfig.After).
	CloseAfter time.Duration
	// CatalogBucket is the catalogue's JetStream key-value bucket, whose
	// plans and key assignments serve mirrors into the ledger
	// (ledger/planmirror); empty: no mirror.
	CatalogBucket string

	// BillingToken is --billing-token as given (billing.ParseTokens
	// syntax); it prints without its secrets.
	BillingToken    edge.Secret
	BillingMaxConns int
	// Billing bounds the usage queries (MaxRows, StatementTimeout) and
	// holds the limiters' accounting window (Window), checked by billing;
	// MaxConns is BillingMaxConns.
	Billing       billing.Config
	ShutdownDelay time.Duration

	// retention subcommand
	KeepMonths  int // months kept before the current one; required (unset: -1)
	AheadMonths int // months after the current one to create partitions for
	// SinkKeep: sink rows acknowledged for periods ended longer ago are
	// removed (sink.Retain); 0 keeps them.
	SinkKeep time.Duration

	// usage subcommand
	Key         string
	From, To    string
	Granularity string
	Format      string
	Quotas      bool   // --quotas: each quota's period, limit, used and remaining instead of buckets
	At          string // --at, RFC 3339: the instant whose periods --quotas shows; empty = now

	// export, events and sinks-report subcommands
	Calendar    string // --calendar of export and the sinks: utc or plan (export.Calendar)
	Month       string // --month 2026-11
	Sink        string // --sink http(s)://… or nats://SUBJECT
	MetricsFile string // --metrics-file, Prometheus text format

	// events and stripe-sync: --continuous passes every --every over the
	// current month; --lookback the earlier periods each run corrects.
	Continuous bool
	Every      time.Duration
	Lookback   time.Duration
}

// defaultOptions are the options before any flag is read: the owners'
// defaults, which the flags bound to them take as theirs.
func defaultOptions() options {
	rec, writer := reconcile.DefaultConfig(), reconcile.DefaultWriterConfig()
	bill := billing.DefaultConfig()
	return options{
		NATS:          "nats://127.0.0.1:4222",
		Postgres:      "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		Listen:        ":8082",
		LogLevel:      settings.DefaultLogLevel,
		Stream:        rec.Stream,
		Durable:       rec.Durable,
		BatchSize:     rec.BatchSize,
		BatchInterval: rec.BatchInterval,
		WriteParallel: writer.Parallel,
		CloseAfter:    reconcile.DefaultCloserConfig().After,
		MaxReportAge:  rec.MaxReportAge,
		MaxReportSkew: rec.MaxReportSkew,
		RefundHorizon: rec.RefundHorizon,

		MaxNewPartitions: writer.MaxNewPartitions,

		QuotaBaseSubject: quotabase.DefaultSubject,
		CatalogBucket:    planmirror.DefaultConfig().Bucket,

		BillingMaxConns: int(bill.MaxConns),
		Billing:         bill,
		ShutdownDelay:   settings.DefaultShutdownDelay,

		Granularity: "hour",
		Format:      "json",

		KeepMonths:  -1,
		AheadMonths: 3,
		SinkKeep:    sink.DefaultKeep,
	}
}

// Bounds of the billing and shutdown flags.
const (
	maxBillingConns            = 64
	maxBillingRows             = 1_000_000
	maxBillingStatementTimeout = 5 * time.Minute
	maxShutdownDelay           = 5 * time.Minute
	maxAheadMonths             = 24
	maxCloseAfter              = 31 * 24 * time.Hour
)

// envPrefix is the prefix of every flag's environment variable:
// --batch-interval reads QUOTA_BATCH_INTERVAL.
const envPrefix = "QUOTA"

// parseFlags parses a subcommand's flags (commandSettings) with ff. Every
// flag also reads its environment variable QUOTA_<FLAG> (upper case,
// dashes to underscores); a flag on the command line wins, and an empty
// variable counts as unset. Only the subcommand's own flags are read, from
// either source.
func parseFlags(cmd string, args []string, stderr io.Writer) (options, error) {
	so := stripeOptions{options: defaultOptions(), KeyEnv: defaultStripeKeyEnv}
	o := &so.options
	s, ok := commandSettings(cmd, &so)
	if !ok {
		return *o, fmt.Errorf("no command %q; reconciler help lists them", cmd)
	}
	fs := s.FlagSet()
	fs.SetOutput(stderr)
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix(envPrefix)); err != nil {
		return *o, err
	}
	if fs.NArg() > 0 {
		return *o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// Each part of a split stream needs its own durable consumer: one
	// shared by reconcilers of different regions would be re-filtered by
	// each in turn.
	if regions, err := o.regions(); cmd == "serve" && err == nil && len(regions) > 0 && !set["durable"] {
		o.Durable = "reconciler-" + strings.Join(regions, "-")
	}
	// The stream's and billing's settings are checked by ledger and
	// billing; the errors name the flags bound to the fields.
	owned := errors.Join(
		field.Map("", o.Stream.Validate(), func(p string) string { return "Stream." + p }),
		field.Map("", o.billingConfig().Validate(), func(p string) string { return "Billing." + p }))
	return *o, errors.Join(s.Check(), o.validate(cmd), s.Explain(owned))
}

// validate checks what involves several of the subcommand's settings
// (commandSettings checks each alone) and reports every bad one, each
// naming its flag (never quoting a token).
func (o *options) validate(cmd string) error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	switch cmd {
	case "stream-migrate":
		if err := o.NATSAuth.Validate(); err != nil {
			errs = append(errs, err)
		}
	case "serve":
		if err := o.NATSAuth.Validate(); err != nil {
			errs = append(errs, err)
		}
		_, err := o.billingAccess()
		check(err == nil, "%v", err)
	case "usage":
		if o.Quotas {
			check(o.Format == "json" || o.Format == "csv" || o.Format == "text", "--format: must be json, csv or text, got %q", o.Format)
			check(o.From == "" && o.To == "", "--from, --to: not with --quotas, which shows the periods that hold --at")
		} else {
			check(o.Format == "json" || o.Format == "csv", "--format: must be json or csv, got %q", o.Format)
			check(o.At == "", "--at: only with --quotas")
		}
	case "export", "events", "sinks-report":
		if !o.Continuous {
			_, _, err := o.month()
			check(err == nil, "--month: %v", err)
		}
		if cmd == "events" {
			errs = append(errs, o.checkSinkRun()...)
			_, _, err := o.sinkTarget()
			check(err == nil, "--sink: %v", err)
			if err := o.NATSAuth.Validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// month is --month as [first day, first day of the next month).
func (o *options) month() (from, to time.Time, err error) {
	from, err = time.Parse("2006-01", o.Month)
	if err != nil {
		return from, to, fmt.Errorf("want a month like 2026-11, got %q", o.Month)
	}
	return from, from.AddDate(0, 1, 0), nil
}

// sinkTarget splits --sink into its kind ("http" or "nats") and target
// (the URL, or the subject).
func (o *options) sinkTarget() (kind, target string, err error) {
	u, perr := url.Parse(o.Sink)
	switch {
	case o.Sink == "":
		return "", "", errors.New("required: http(s)://URL or nats://SUBJECT")
	case perr != nil:
		return "", "", errors.New("not a URL")
	case u.Scheme == "http" || u.Scheme == "https":
		return "http", o.Sink, nil
	case u.Scheme == "nats" && u.Host != "" && u.Path == "" && u.User == nil:
		return "nats", u.Host, nil
	}
	return "", "", errors.New("want http(s)://URL or nats://SUBJECT")
}

// sinkName is the sink's name in billing_sink_events and metrics: the
// URL without a password, or nats:SUBJECT.
func (o *options) sinkName() string {
	if kind, subject, err := o.sinkTarget(); err == nil && kind == "nats" {
		return "nats:" + subject
	}
	return redact(o.Sink)
}

// billingAccess is the billing.Access of --billing-token.
func (o *options) billingAccess() (*billing.Access, error) {
	tokens, err := billing.ParseTokens(string(o.BillingToken))
	if err != nil {
		return nil, fmt.Errorf("--billing-token: %w", err)
	}
	return billing.NewAccess(tokens)
}

// billingConfig is the billing.Config of the flags.
func (o *options) billingConfig() billing.Config {
	cfg := o.Billing
	cfg.MaxConns = int32(o.BillingMaxConns)
	return cfg
}

// validBucket reports whether b names a JetStream key-value bucket (as
// nats.go checks it: letters, digits, '-' and '_'), or is empty.
func validBucket(b string) bool {
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// regions reads --regions: region names (subject tokens), each once.
func (o *options) regions() ([]string, error) {
	if strings.TrimSpace(o.Regions) == "" {
		return nil, nil
	}
	var out []string
	for i, r := range strings.Split(o.Regions, ",") {
		r = strings.TrimSpace(r)
		switch {
		case r == "" || strings.ContainsAny(r, ".*> \t"):
			return nil, fmt.Errorf("entry %d %q is not a region name (a subject token: no '.', '*', '>' or space)", i+1, r)
		case slices.Contains(out, r):
			return nil, fmt.Errorf("region %q appears twice", r)
		}
		out = append(out, r)
	}
	return out, nil
}
