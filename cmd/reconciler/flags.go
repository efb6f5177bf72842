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
	"github.com/quotaplatform/quota/internal/tracing"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/planmirror"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// options are the reconciler's settings from flags and environment.
type options struct {
	NATS     string
	NATSAuth edge.NATSAuth
	Postgres string
	Listen   string
	LogLevel string

	Stream         string
	StreamReplicas int
	StreamMaxBytes int64
	StreamCluster  string // placement of the usage stream when this process creates it
	Durable        string
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
	OTLPEndpoint     string // --otlp-endpoint: OTLP/HTTP collector for traces; empty = off
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
	BillingToken            edge.Secret
	BillingMaxConns         int
	BillingStatementTimeout time.Duration
	BillingMaxRows          int
	ShutdownDelay           time.Duration

	// retention subcommand
	KeepMonths  int // months kept before the current one; required (unset: -1)
	AheadMonths int // months after the current one to create partitions for

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

func defaultOptions() options {
	return options{
		NATS:           "nats://127.0.0.1:4222",
		Postgres:       "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		Listen:         ":8081",
		LogLevel:       "info",
		Stream:         "QUOTA_USAGE",
		StreamReplicas: 1,
		StreamMaxBytes: ledger.DefaultStreamConfig().MaxBytes,
		Durable:        "reconciler",
		BatchSize:      5000,
		BatchInterval:  200 * time.Millisecond,
		WriteParallel:  reconcile.DefaultWriterConfig().Parallel,
		CloseAfter:     reconcile.DefaultCloserConfig().After,
		MaxReportAge:   reconcile.DefaultConfig().MaxReportAge,
		MaxReportSkew:  reconcile.DefaultConfig().MaxReportSkew,

		MaxNewPartitions: reconcile.DefaultWriterConfig().MaxNewPartitions,

		QuotaBaseSubject: quotabase.DefaultSubject,
		CatalogBucket:    planmirror.DefaultConfig().Bucket,

		BillingMaxConns:         int(billing.DefaultConfig().MaxConns),
		BillingStatementTimeout: billing.DefaultConfig().StatementTimeout,
		BillingMaxRows:          billing.DefaultConfig().MaxRows,
		ShutdownDelay:           5 * time.Second,

		Granularity: "hour",
		Format:      "json",

		KeepMonths:  -1,
		AheadMonths: 3,
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

// parseFlags parses a subcommand's flags with ff. Every flag also reads its
// environment variable QUOTA_<FLAG> (upper case, dashes to underscores); a
// flag on the command line wins, and an empty variable counts as unset.
// Only the subcommand's own flags are read, from either source.
func parseFlags(cmd string, args []string, stderr io.Writer) (options, error) {
	o := defaultOptions()
	fs := newFlagSet(cmd, &o)
	fs.SetOutput(stderr)
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix(envPrefix)); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// Each part of a split stream needs its own durable consumer: one
	// shared by reconcilers of different regions would be re-filtered by
	// each in turn.
	if regions, err := o.regions(); cmd == "serve" && err == nil && len(regions) > 0 && !set["durable"] {
		o.Durable = "reconciler-" + strings.Join(regions, "-")
	}
	return o, o.validate(cmd)
}

// newFlagSet declares cmd's flags on o.
func newFlagSet(cmd string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("reconciler "+cmd, flag.ContinueOnError)
	fs.StringVar(&o.Postgres, "postgres", o.Postgres, "Postgres URL (sslmode in the URL, e.g. ?sslmode=verify-full)")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
	if cmd == "serve" || cmd == "usage" {
		fs.DurationVar(&o.BillingStatementTimeout, "billing-statement-timeout", o.BillingStatementTimeout,
			"longest usage query (context deadline and Postgres statement_timeout)")
		fs.IntVar(&o.BillingMaxRows, "billing-max-rows", o.BillingMaxRows, "most rows (buckets) one usage query may answer")
	}
	if cmd == "serve" {
		fs.StringVar(&o.NATS, "nats", o.NATS, "NATS URL (comma-separated list allowed)")
		fs.StringVar(&o.NATSAuth.User, "nats-user", "", "NATS user (the reconciler role); needs --nats-password")
		fs.Var(&o.NATSAuth.Password, "nats-password", "password of --nats-user (use the environment: QUOTA_NATS_PASSWORD)")
		fs.StringVar(&o.NATSAuth.Creds, "nats-creds", "", "NATS credentials file (JWT auth), instead of --nats-user")
		fs.StringVar(&o.NATSAuth.TLSCA, "nats-tls-ca", "", "CA file to verify the NATS server")
		fs.StringVar(&o.NATSAuth.TLSCert, "nats-tls-cert", "", "client certificate for NATS")
		fs.StringVar(&o.NATSAuth.TLSKey, "nats-tls-key", "", "client key for NATS")
		fs.IntVar(&o.StreamReplicas, "stream-replicas", o.StreamReplicas, "replicas of the usage stream when this process creates it (never changes an existing one)")
		fs.Int64Var(&o.StreamMaxBytes, "stream-max-bytes", o.StreamMaxBytes, "byte limit of the usage stream when this process creates it")
		fs.StringVar(&o.StreamCluster, "stream-cluster", o.StreamCluster, "the NATS cluster (region name) the usage stream is placed in when this process creates it; the deploy sets the ledger region; empty = where this process is connected")
		fs.StringVar(&o.Listen, "listen", o.Listen, "HTTP address for /v1/usage, /metrics, /healthz, /readyz")
		fs.StringVar(&o.Stream, "stream", o.Stream, "JetStream stream of usage reports")
		fs.StringVar(&o.Durable, "durable", o.Durable, "durable consumer name (default with --regions: reconciler-<regions joined by ->)")
		fs.StringVar(&o.Regions, "regions", "", "consume only these regions' reports, comma-separated, to split the stream between reconcilers (one per region, each its own --durable); empty = every region")
		fs.IntVar(&o.BatchSize, "batch-size", o.BatchSize, "most reports per Postgres transaction")
		fs.DurationVar(&o.BatchInterval, "batch-interval", o.BatchInterval, "longest wait to fill a batch")
		fs.IntVar(&o.WriteParallel, "write-parallel", o.WriteParallel,
			"write each batch as up to this many primary-key ranges at once, each its own transaction on its own Postgres connection (about Postgres's cores; 1: one transaction per batch)")
		fs.DurationVar(&o.CloseAfter, "close-after", o.CloseAfter,
			"close the ledger rows of a process that sent nothing for this long past the window's end (it died without its final report): they count as final, marked closed_by_reconciler, billed at its last report; checked every min(30s, close-after/4)")
		fs.DurationVar(&o.MaxReportAge, "max-report-age", o.MaxReportAge,
			"dead-letter (too_old) a report whose window starts longer ago than this; keep it within retention's --keep-months (0: no bound)")
		fs.DurationVar(&o.MaxReportSkew, "max-report-skew", o.MaxReportSkew,
			"dead-letter (future) a report whose window starts later than this after now (0: no bound)")
		fs.IntVar(&o.MaxNewPartitions, "max-new-partitions", o.MaxNewPartitions,
			"most month partitions one write creates; reports of further months wait for later batches")
		fs.Var(&o.BillingToken, "billing-token",
			"bearer tokens of GET /v1/usage, comma-separated: TOKEN (every key) or prefix:PREFIX=TOKEN (keys starting with PREFIX); none: /v1/usage answers 503")
		fs.IntVar(&o.BillingMaxConns, "billing-max-conns", o.BillingMaxConns, "size of the usage queries' own Postgres pool")
		fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay, "on SIGTERM, fail /readyz and keep serving this long before stopping")
		fs.StringVar(&o.QuotaBaseSubject, "quota-base-subject", o.QuotaBaseSubject,
			"NATS subject of quota-base requests: the limiters ask what a key spent in a quota period, by region; answered from the ledger in queue group "+quotabase.DefaultQueue)
		fs.StringVar(&o.CatalogBucket, "catalog-bucket", o.CatalogBucket,
			"the catalogue's JetStream key-value bucket (the limiters'): its plans and key assignments are mirrored into the ledger for billing by period (needs read access to it); empty: no mirror")
		fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "OTLP/HTTP collector URL for traces of the reconciler's batches (e.g. http://otel-collector:4318); empty: tracing off")
	}
	if cmd == "retention" {
		fs.IntVar(&o.KeepMonths, "keep-months", o.KeepMonths,
			"detach the ledger's month partitions older than the current month and this many before it (required)")
		fs.IntVar(&o.AheadMonths, "ahead-months", o.AheadMonths, "create the partitions of this many months after the current one")
		fs.StringVar(&o.MetricsFile, "metrics-file", "", "write the run's metrics here (Prometheus text format), e.g. the months kept back for open credit")
	}
	if cmd == "export" || cmd == "events" || cmd == "sinks-report" {
		fs.StringVar(&o.Month, "month", "", "the UTC month, e.g. 2026-11 (required, except with --continuous)")
		fs.StringVar(&o.Granularity, "granularity", "month", "period: hour, day or month (UTC, or on --calendar plan the plan's)")
		fs.DurationVar(&o.BillingStatementTimeout, "billing-statement-timeout", o.BillingStatementTimeout,
			"longest query of one page of keys")
		calendarFlag(fs, o)
	}
	if cmd == "export" {
		fs.StringVar(&o.Format, "format", "csv", "csv or ndjson")
	}
	if cmd == "events" || cmd == "sinks-report" {
		fs.StringVar(&o.Sink, "sink", "", "where usage events go: http(s)://URL (CloudEvents over HTTP) or nats://SUBJECT (JetStream, on --nats)")
	}
	if cmd == "events" {
		fs.StringVar(&o.NATS, "nats", o.NATS, "NATS URL for a nats:// sink")
		fs.StringVar(&o.NATSAuth.User, "nats-user", "", "NATS user; needs --nats-password")
		fs.Var(&o.NATSAuth.Password, "nats-password", "password of --nats-user (use the environment: QUOTA_NATS_PASSWORD)")
		fs.StringVar(&o.NATSAuth.Creds, "nats-creds", "", "NATS credentials file (JWT auth)")
		fs.StringVar(&o.MetricsFile, "metrics-file", "", "write the run's metrics here (Prometheus text format, for node_exporter's textfile collector)")
		sinkRunFlags(fs, o)
	}
	if cmd == "usage" {
		fs.StringVar(&o.Key, "key", "", "API key (required)")
		fs.StringVar(&o.From, "from", "", "start, RFC 3339 (required)")
		fs.StringVar(&o.To, "to", "", "end, RFC 3339, exclusive (required)")
		fs.StringVar(&o.Granularity, "granularity", o.Granularity, "hour, day or window")
		fs.StringVar(&o.Format, "format", o.Format, "json or csv; with --quotas also text")
		fs.BoolVar(&o.Quotas, "quotas", false, "print each quota of the key's plan in the period that holds --at: limit, used, remaining (instead of --from, --to, --granularity)")
		fs.StringVar(&o.At, "at", "", "with --quotas: the instant, RFC 3339 (default now)")
	}
	return fs
}

// calendarFlag declares --calendar, for export and the sinks (events,
// sinks-report, stripe-sync).
func calendarFlag(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.Calendar, "calendar", "utc",
		"utc: UTC periods; plan: each key's periods on its plan's time_zone and anchor_day (a key without a mirrored plan: UTC), "+
			"those that start in the UTC --month. A sink's event ids follow the period start: choose a sink's calendar once")
}

// checkCalendar validates --calendar.
func (o *options) checkCalendar() []error {
	if o.Calendar == "utc" || o.Calendar == "plan" {
		return nil
	}
	return []error{fmt.Errorf("--calendar: must be utc or plan, got %q", o.Calendar)}
}

// validate checks the subcommand's options and reports every bad one, each
// naming its flag (never quoting a token).
func (o *options) validate(cmd string) error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	_, err := url.Parse(o.Postgres)
	check(err == nil && o.Postgres != "", "--postgres: not a URL")
	if cmd == "serve" || cmd == "usage" {
		check(o.BillingStatementTimeout >= time.Millisecond && o.BillingStatementTimeout <= maxBillingStatementTimeout,
			"--billing-statement-timeout: must be 1ms to %v, got %v", maxBillingStatementTimeout, o.BillingStatementTimeout)
		check(o.BillingMaxRows >= 1 && o.BillingMaxRows <= maxBillingRows,
			"--billing-max-rows: must be 1 to %d, got %d", maxBillingRows, o.BillingMaxRows)
	}
	switch cmd {
	case "serve":
		check(o.NATS != "", "--nats: required")
		if err := o.NATSAuth.Validate(); err != nil {
			errs = append(errs, err)
		}
		check(o.StreamReplicas >= 1 && o.StreamReplicas <= 5, "--stream-replicas: must be 1 to 5, got %d", o.StreamReplicas)
		check(o.StreamMaxBytes >= 1<<20, "--stream-max-bytes: must be at least 1 MiB, got %d", o.StreamMaxBytes)
		if err := ledger.CheckClusterName(o.StreamCluster); err != nil {
			errs = append(errs, fmt.Errorf("--stream-cluster: %w", err))
		}
		_, err := o.regions()
		check(err == nil, "--regions: %v", err)
		check(o.BatchSize >= 1, "--batch-size: must be at least 1, got %d", o.BatchSize)
		check(o.BatchInterval > 0, "--batch-interval: must be positive, got %v", o.BatchInterval)
		check(o.WriteParallel >= 1 && o.WriteParallel <= reconcile.MaxWriteParallel,
			"--write-parallel: must be 1 to %d, got %d", reconcile.MaxWriteParallel, o.WriteParallel)
		check(o.CloseAfter > 0 && o.CloseAfter <= maxCloseAfter,
			"--close-after: must be positive and at most %v, got %v", maxCloseAfter, o.CloseAfter)
		check(o.MaxReportAge >= 0, "--max-report-age: must be 0 (no bound) or positive, got %v", o.MaxReportAge)
		check(o.MaxReportSkew >= 0, "--max-report-skew: must be 0 (no bound) or positive, got %v", o.MaxReportSkew)
		check(o.MaxNewPartitions >= 1 && o.MaxNewPartitions <= reconcile.MaxNewPartitionsLimit,
			"--max-new-partitions: must be 1 to %d, got %d", reconcile.MaxNewPartitionsLimit, o.MaxNewPartitions)
		check(o.BillingMaxConns >= 1 && o.BillingMaxConns <= maxBillingConns,
			"--billing-max-conns: must be 1 to %d, got %d", maxBillingConns, o.BillingMaxConns)
		check(o.ShutdownDelay >= 0 && o.ShutdownDelay <= maxShutdownDelay,
			"--shutdown-delay: must be 0 to %v, got %v", maxShutdownDelay, o.ShutdownDelay)
		if err := tracing.CheckEndpoint(o.OTLPEndpoint); err != nil {
			errs = append(errs, fmt.Errorf("--otlp-endpoint: %w", err))
		}
		if err := quotabase.CheckSubject(o.QuotaBaseSubject); err != nil {
			errs = append(errs, fmt.Errorf("--quota-base-subject: %w", err))
		}
		check(validBucket(o.CatalogBucket), "--catalog-bucket: %q is not a key-value bucket name (letters, digits, '-', '_'; empty: no mirror)", o.CatalogBucket)
		_, err = o.billingAccess()
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
		check(o.Granularity == "hour" || o.Granularity == "day" || o.Granularity == "month",
			"--granularity: must be hour, day or month, got %q", o.Granularity)
		check(o.BillingStatementTimeout >= time.Millisecond && o.BillingStatementTimeout <= maxBillingStatementTimeout,
			"--billing-statement-timeout: must be 1ms to %v, got %v", maxBillingStatementTimeout, o.BillingStatementTimeout)
		if cmd == "export" {
			check(o.Format == "csv" || o.Format == "ndjson", "--format: must be csv or ndjson, got %q", o.Format)
		}
		errs = append(errs, o.checkCalendar()...)
		if cmd == "events" {
			errs = append(errs, o.checkSinkRun()...)
			_, _, err := o.sinkTarget()
			check(err == nil, "--sink: %v", err)
			if err := o.NATSAuth.Validate(); err != nil {
				errs = append(errs, err)
			}
		}
	case "retention":
		check(o.KeepMonths >= 0, "--keep-months: required, 0 or more, got %d", o.KeepMonths)
		check(o.AheadMonths >= 0 && o.AheadMonths <= maxAheadMonths,
			"--ahead-months: must be 0 to %d, got %d", maxAheadMonths, o.AheadMonths)
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
	cfg := billing.DefaultConfig()
	cfg.MaxRows = o.BillingMaxRows
	cfg.StatementTimeout = o.BillingStatementTimeout
	cfg.MaxConns = int32(o.BillingMaxConns)
	return cfg
}

// redact hides passwords in a URL, a comma-separated list of URLs, or a
// libpq keyword/value string (host=… password=…), for logs.
func redact(urls string) string {
	if isKeywordDSN(urls) {
		return redactKeywordDSN(urls)
	}
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "<unparsable>"
			continue
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		q := u.Query()
		for k := range q {
			if lk := strings.ToLower(k); lk == "password" || lk == "sslpassword" {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// isKeywordDSN reports whether s is a libpq keyword/value connection
// string ("host=db user=u password=…") rather than a URL: no scheme, and
// its first word is key=value.
func isKeywordDSN(s string) bool {
	s = strings.TrimSpace(s)
	first, _, _ := strings.Cut(s, " ")
	return !strings.Contains(s, "://") && strings.Contains(first, "=")
}

// redactKeywordDSN replaces the values of password and sslpassword in a
// libpq keyword/value string by xxxxx. Values are read as libpq reads
// them: up to white space, or between single quotes with \' and \\
// escaped; "key = value" may have spaces around the "=".
func redactKeywordDSN(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		// white space, then the key up to "=" or white space
		j := i
		for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
			j++
		}
		k := j
		for k < len(s) && s[k] != '=' && s[k] != ' ' && s[k] != '\t' && s[k] != '\n' && s[k] != '\r' {
			k++
		}
		key := s[j:k]
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		if k >= len(s) || s[k] != '=' {
			b.WriteString(s[i:k])
			i = k
			if k < len(s) {
				b.WriteByte(s[k])
				i++
			}
			continue
		}
		k++ // "="
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		v := k // the value: quoted or up to white space
		if v < len(s) && s[v] == '\'' {
			v++
			for v < len(s) && s[v] != '\'' {
				if s[v] == '\\' {
					v++
				}
				v++
			}
			v = min(v+1, len(s))
		} else {
			for v < len(s) && s[v] != ' ' && s[v] != '\t' && s[v] != '\n' && s[v] != '\r' {
				v++
			}
		}
		b.WriteString(s[i:k])
		if lk := strings.ToLower(key); lk == "password" || lk == "sslpassword" {
			b.WriteString("xxxxx")
		} else {
			b.WriteString(s[k:v])
		}
		i = v
	}
	return b.String()
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
