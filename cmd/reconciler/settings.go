package main

import (
	"fmt"
	"net/url"
	"time"

	"github.com/quotaplatform/quota/internal/settings"
	"github.com/quotaplatform/quota/internal/tracing"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/ledger/sink"
)

// The settings of each subcommand (commands lists which declares which),
// each declared once here: flag, default, help and the check of its value
// alone. Checks across settings are in options.validate and
// parseStripeFlags. docs/configuration.md's reconciler tables are
// generated from these (TestSettingsTables).

// defaultStripeKeyEnv is --stripe-key-env's default.
const defaultStripeKeyEnv = "QUOTA_STRIPE_KEY"

// declareCommon declares the settings every subcommand has.
func declareCommon(s *settings.Set, o *options) {
	s.String(&o.Postgres, "postgres", o.Postgres, "Postgres URL (sslmode in the URL, e.g. ?sslmode=verify-full)").
		Check(func() error {
			_, err := url.Parse(o.Postgres)
			return want(err == nil && o.Postgres != "", "not a URL")
		})
	// --log-level is checked by edge.NewLogger.
	s.String(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
}

func declareServe(s *settings.Set, so *stripeOptions) {
	o := &so.options
	declareBillingQuery(s, o, "longest usage query (context deadline and Postgres statement_timeout)")
	declareUsageStream(s, o, "NATS user (the reconciler role); needs --nats-password")
	s.String(&o.Listen, "listen", o.Listen, "HTTP address for /v1/usage, /metrics, /healthz, /readyz")
	s.String(&o.Durable, "durable", o.Durable, "durable consumer name (default with --regions: reconciler-<regions joined by ->)")
	s.String(&o.Regions, "regions", "", "consume only these regions' reports, comma-separated, to split the stream between reconcilers (one per region, each its own --durable); empty = every region").
		Check(func() error {
			_, err := o.regions()
			return err
		})
	s.Int(&o.BatchSize, "batch-size", o.BatchSize, "most reports per Postgres transaction").
		Check(func() error { return want(o.BatchSize >= 1, "must be at least 1, got %d", o.BatchSize) })
	s.Duration(&o.BatchInterval, "batch-interval", o.BatchInterval, "longest wait to fill a batch").
		Check(func() error { return want(o.BatchInterval > 0, "must be positive, got %v", o.BatchInterval) })
	s.Int(&o.WriteParallel, "write-parallel", o.WriteParallel,
		"write each batch as up to this many primary-key ranges at once, each its own transaction on its own Postgres connection (about Postgres's cores; 1: one transaction per batch)").
		Check(func() error {
			return want(o.WriteParallel >= 1 && o.WriteParallel <= reconcile.MaxWriteParallel,
				"must be 1 to %d, got %d", reconcile.MaxWriteParallel, o.WriteParallel)
		})
	s.Duration(&o.CloseAfter, "close-after", o.CloseAfter,
		"close the ledger rows of a process that sent nothing for this long past the window's end (it died without its final report): they count as final, marked closed_by_reconciler, billed at its last report; checked every min(30s, close-after/4)").
		Check(func() error {
			return want(o.CloseAfter > 0 && o.CloseAfter <= maxCloseAfter, "must be positive and at most %v, got %v", maxCloseAfter, o.CloseAfter)
		})
	s.Duration(&o.MaxReportAge, "max-report-age", o.MaxReportAge,
		"dead-letter (too_old) a report whose window starts longer ago than this; keep it within retention's --keep-months (0: no bound)").
		Check(func() error {
			return want(o.MaxReportAge >= 0, "must be 0 (no bound) or positive, got %v", o.MaxReportAge)
		})
	s.Duration(&o.MaxReportSkew, "max-report-skew", o.MaxReportSkew,
		"dead-letter (future) a report whose window starts later than this after now (0: no bound)").
		Check(func() error {
			return want(o.MaxReportSkew >= 0, "must be 0 (no bound) or positive, got %v", o.MaxReportSkew)
		})
	s.Duration(&o.RefundHorizon, "refund-horizon", o.RefundHorizon,
		"a refund may take back what its key's region spent in the windows starting this long before the refund's (refund_exceeds_spent above that); set it to the limiters' idempotency horizon (0: its own row only)").
		Check(func() error {
			return want(o.RefundHorizon >= 0 && o.RefundHorizon <= reconcile.MaxRefundHorizon,
				"must be 0 to %v, got %v", reconcile.MaxRefundHorizon, o.RefundHorizon)
		})
	s.Int(&o.MaxNewPartitions, "max-new-partitions", o.MaxNewPartitions,
		"most month partitions one write creates; reports of further months wait for later batches").
		Check(func() error {
			return want(o.MaxNewPartitions >= 1 && o.MaxNewPartitions <= reconcile.MaxNewPartitionsLimit,
				"must be 1 to %d, got %d", reconcile.MaxNewPartitionsLimit, o.MaxNewPartitions)
		})
	// --billing-token is checked whole by billingAccess, whose errors
	// name it (options.validate).
	s.Var(&o.BillingToken, "billing-token",
		"bearer tokens of GET /v1/usage, comma-separated: TOKEN (every key) or prefix:PREFIX=TOKEN (keys starting with PREFIX); none: /v1/usage answers 503")
	s.Int(&o.BillingMaxConns, "billing-max-conns", o.BillingMaxConns, "size of the usage queries' own Postgres pool").
		Field("Billing.MaxConns").
		Check(func() error {
			return want(o.BillingMaxConns <= maxBillingConns, "must be at most %d, got %d", maxBillingConns, o.BillingMaxConns)
		})
	s.Duration(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay, "on SIGTERM, fail /readyz and keep serving this long before stopping").
		Check(func() error {
			return want(o.ShutdownDelay >= 0 && o.ShutdownDelay <= maxShutdownDelay, "must be 0 to %v, got %v", maxShutdownDelay, o.ShutdownDelay)
		})
	s.String(&o.QuotaBaseSubject, "quota-base-subject", o.QuotaBaseSubject,
		"NATS subject of quota-base requests: the limiters ask what a key spent in a quota period, by region; answered from the ledger in queue group "+quotabase.DefaultQueue).
		Check(func() error { return quotabase.CheckSubject(o.QuotaBaseSubject) })
	s.String(&o.CatalogBucket, "catalog-bucket", o.CatalogBucket,
		"the catalogue's JetStream key-value bucket (the limiters'): its plans and key assignments are mirrored into the ledger for billing by period (needs read access to it); empty: no mirror").
		Check(func() error {
			return want(validBucket(o.CatalogBucket), "%q is not a key-value bucket name (letters, digits, '-', '_'; empty: no mirror)", o.CatalogBucket)
		})
	s.String(&o.OTLPEndpoint, "otlp-endpoint", "", "OTLP/HTTP collector URL for traces of the reconciler's batches (e.g. http://otel-collector:4318); empty: tracing off").
		Check(func() error { return tracing.CheckEndpoint(o.OTLPEndpoint) })
}

func declareMigrate(*settings.Set, *stripeOptions) {}

func declareRetention(s *settings.Set, so *stripeOptions) {
	o := &so.options
	s.Int(&o.KeepMonths, "keep-months", o.KeepMonths,
		"detach the ledger's month partitions older than the current month and this many before it (required)").
		Check(func() error { return want(o.KeepMonths >= 0, "required, 0 or more, got %d", o.KeepMonths) })
	s.Int(&o.AheadMonths, "ahead-months", o.AheadMonths, "create the partitions of this many months after the current one").
		Check(func() error {
			return want(o.AheadMonths >= 0 && o.AheadMonths <= maxAheadMonths, "must be 0 to %d, got %d", maxAheadMonths, o.AheadMonths)
		})
	s.String(&o.MetricsFile, "metrics-file", "", "write the run's metrics here (Prometheus text format), e.g. the months kept back for open credit")
	s.Duration(&o.SinkKeep, "sink-keep", o.SinkKeep,
		"remove the sink rows acknowledged for periods that ended longer ago than this, keeping per key and month their sums (billing_sink_retained); not under serve's --max-report-age; 0: keep all").
		Check(func() error {
			return want(o.SinkKeep == 0 || o.SinkKeep >= sink.DefaultLookback, "must be 0 or at least %v, got %v", sink.DefaultLookback, o.SinkKeep)
		})
}

func declareUsage(s *settings.Set, so *stripeOptions) {
	o := &so.options
	declareBillingQuery(s, o, "longest usage query (context deadline and Postgres statement_timeout)")
	s.String(&o.Key, "key", "", "API key (required)")
	s.String(&o.From, "from", "", "start, RFC 3339 (required)")
	s.String(&o.To, "to", "", "end, RFC 3339, exclusive (required)")
	s.String(&o.Granularity, "granularity", o.Granularity, "hour, day or window")
	// --format's values depend on --quotas (options.validate).
	s.String(&o.Format, "format", o.Format, "json or csv; with --quotas also text")
	s.Bool(&o.Quotas, "quotas", false, "print each quota of the key's plan in the period that holds --at: limit, used, remaining (instead of --from, --to, --granularity)")
	s.String(&o.At, "at", "", "with --quotas: the instant, RFC 3339 (default now)")
}

func declareExport(s *settings.Set, so *stripeOptions) {
	o := &so.options
	declarePeriods(s, o, "period: hour, day or month (UTC, or on --calendar plan the plan's)")
	s.String(&o.Format, "format", "csv", "csv or ndjson").
		Check(func() error {
			return want(o.Format == "csv" || o.Format == "ndjson", "must be csv or ndjson, got %q", o.Format)
		})
}

func declareEvents(s *settings.Set, so *stripeOptions) {
	o := &so.options
	declarePeriods(s, o, "period: hour, day or month (UTC, or on --calendar plan the plan's)")
	declareSink(s, o)
	s.String(&o.NATS, "nats", o.NATS, "NATS URL for a nats:// sink")
	declareNATSClient(s, o, "NATS user; needs --nats-password", "")
	s.String(&o.MetricsFile, "metrics-file", "", "write the run's metrics here (Prometheus text format, for node_exporter's textfile collector)")
	declareSinkRun(s, o)
}

func declareSinksReport(s *settings.Set, so *stripeOptions) {
	o := &so.options
	declarePeriods(s, o, "period: hour, day or month (UTC, or on --calendar plan the plan's)")
	declareSink(s, o)
}

func declareStripeSync(s *settings.Set, o *stripeOptions) {
	declarePeriods(s, &o.options, "period: hour, day or month (UTC, or on --calendar plan the plan's); hour with --continuous")
	declareSinkRun(s, &o.options)
	s.Duration(&o.FinalizationGrace, "finalization-grace", sink.DefaultFinalizationGrace,
		"how long after an invoice period Stripe finalizes the invoice (the account's setting, 0 to 72h)").
		Check(func() error {
			return want(o.FinalizationGrace >= 0 && o.FinalizationGrace <= sink.MaxFinalizationGrace,
				"must be 0 to %v, got %v", sink.MaxFinalizationGrace, o.FinalizationGrace)
		})
	// One v1 request per event by default: Stripe checks a v1 event before it answers, but a v2
	// stream's events after, and reports one it then rejects only to its meter error webhook,
	// which nothing here reads: the ledger would record it sent and it would never be billed.
	s.Int(&o.StripeBatch, "stripe-batch", 1,
		"meter events per request: 1, one v1 request per event, which Stripe checks before answering; 2 to 100, that many per request on Stripe's v2 meter event stream, which Stripe checks only after accepting (an event it then rejects is reported to its meter error webhook, not here)").
		Check(func() error {
			return want(o.StripeBatch >= 1 && o.StripeBatch <= sink.MaxStripeBatch, "must be 1 to %d, got %d", sink.MaxStripeBatch, o.StripeBatch)
		})
	s.Duration(&o.SettleAfter, "settle-after", sink.DefaultStripeSettleAfter,
		"wait this long after an attempt that may have stored an event (timeout, lost answer, 5xx) before Stripe's meter event summaries, which lag, decide it").
		Check(func() error { return want(o.SettleAfter > 0, "must be positive, got %v", o.SettleAfter) })
	declareMeter(s, o)
	s.String(&o.KeyEnv, "stripe-key-env", o.KeyEnv, "name of the environment variable holding the Stripe secret key").
		Check(func() error { return want(o.KeyEnv != "", "required") })
	s.String(&o.URL, "stripe-url", "", "Stripe API base URL (empty: Stripe; for tests, a stripe-mock)").
		Check(func() error {
			u, err := url.Parse(o.URL)
			return want(o.URL == "" || (err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil),
				"want http(s)://HOST[:PORT] without credentials")
		})
	s.String(&o.MetricsFile, "metrics-file", "", "write the run's metrics here (Prometheus text format)")
}

func declareStripeSettle(s *settings.Set, o *stripeOptions) {
	declareMeter(s, o)
	s.String(&o.EventID, "event-id", "", "the held event's id, as stripe-sync printed it (required)").
		Check(func() error { return want(o.EventID != "", "required") })
	s.String(&o.Outcome, "outcome", "", "what Stripe's meter event summaries show: delivered (Stripe holds it) or missing (send it again)").
		Check(func() error {
			return want(o.Outcome == "delivered" || o.Outcome == "missing", "must be delivered or missing, got %q", o.Outcome)
		})
}

func declareStripeCustomerSet(s *settings.Set, o *stripeOptions) {
	s.String(&o.Key, "key", "", "API key (required)").
		Check(func() error { return want(o.Key != "", "required") })
	s.String(&o.Customer, "customer", "", "Stripe customer id, cus_… (required)").
		Check(func() error { return want(o.Customer != "", "required") })
	s.String(&o.From, "from", "", "RFC 3339: the customer is billed for periods ending after this instant, earlier ones keep theirs (default: every period)").
		Check(func() error {
			if o.From == "" {
				return nil
			}
			_, err := time.Parse(time.RFC3339, o.From)
			return err
		})
	// Given both or neither: parseStripeFlags.
	s.Int(&o.AnchorDay, "anchor-day", 0, "the customer's billing cycle anchor day, 1–31 (with --time-zone; unset: the UTC month)").
		Check(func() error {
			return want(o.AnchorDay >= 0 && o.AnchorDay <= 31, "must be 1 to 31, got %d", o.AnchorDay)
		})
	s.String(&o.TimeZone, "time-zone", "", "IANA time zone of --anchor-day, e.g. America/New_York").
		Check(func() error {
			if o.TimeZone == "" {
				return nil
			}
			_, err := time.LoadLocation(o.TimeZone)
			return err
		})
}

func declareStripeCustomerList(*settings.Set, *stripeOptions) {}

// declareBillingQuery declares the bounds of the usage queries (serve,
// usage).
func declareBillingQuery(s *settings.Set, o *options, timeoutHelp string) {
	declareStatementTimeout(s, o, timeoutHelp)
	s.Int(&o.Billing.MaxRows, "billing-max-rows", o.Billing.MaxRows, "most rows (buckets) one usage query may answer").
		Field("Billing.MaxRows").
		Check(func() error {
			return want(o.Billing.MaxRows <= maxBillingRows, "must be at most %d, got %d", maxBillingRows, o.Billing.MaxRows)
		})
	s.Duration(&o.Billing.Window, "window", o.Billing.Window,
		"the limiters' accounting window (their --window): what a window-granularity query's rows are counted by").
		Field("Billing.Window")
}

func declareStatementTimeout(s *settings.Set, o *options, help string) {
	// billing rounds it up to whole milliseconds; the daemon caps it.
	s.Duration(&o.Billing.StatementTimeout, "billing-statement-timeout", o.Billing.StatementTimeout, help).
		Field("Billing.StatementTimeout").
		Check(func() error {
			return want(o.Billing.StatementTimeout <= maxBillingStatementTimeout,
				"must be at most %v, got %v", maxBillingStatementTimeout, o.Billing.StatementTimeout)
		})
}

// declareUsageStream declares the NATS connection and the usage stream's
// settings (serve, stream-migrate).
func declareUsageStream(s *settings.Set, o *options, userHelp string) {
	s.String(&o.NATS, "nats", o.NATS, "NATS URL (comma-separated list allowed)").
		Check(func() error { return want(o.NATS != "", "required") })
	declareNATSClient(s, o, userHelp, ", instead of --nats-user")
	s.String(&o.NATSAuth.TLSCA, "nats-tls-ca", "", "CA file to verify the NATS server")
	s.String(&o.NATSAuth.TLSCert, "nats-tls-cert", "", "client certificate for NATS")
	s.String(&o.NATSAuth.TLSKey, "nats-tls-key", "", "client key for NATS")
	s.Int(&o.Stream.Replicas, "stream-replicas", o.Stream.Replicas, "replicas of the usage stream when this process creates it (never changes an existing one)").
		Field("Stream.Replicas")
	s.Int64(&o.Stream.MaxBytes, "stream-max-bytes", o.Stream.MaxBytes, "byte limit of the usage stream when this process creates it").
		Field("Stream.MaxBytes")
	s.String(&o.Stream.Cluster, "stream-cluster", o.Stream.Cluster, "the NATS cluster (region name) the usage stream is placed in when this process creates it; the deploy sets the ledger region; empty = where this process is connected").
		Field("Stream.Cluster")
	s.String(&o.Stream.Name, "stream", o.Stream.Name, "JetStream stream of usage reports").Field("Stream.Name")
}

func declareStreamMigrate(s *settings.Set, so *stripeOptions) {
	o := &so.options
	declareUsageStream(s, o, "NATS user allowed to edit and delete the usage stream (not the reconciler role); needs --nats-password")
	s.Duration(&o.MigrateWait, "migrate-wait", 30*time.Minute,
		"longest wait for the reconcilers to write what the old stream holds; past it the stream is reopened and nothing is deleted").
		Check(func() error { return want(o.MigrateWait > 0, "must be positive, got %v", o.MigrateWait) })
}

// declareNATSClient declares a NATS user's flags (serve, events); its
// checks are o.NATSAuth.Validate's.
func declareNATSClient(s *settings.Set, o *options, userHelp, credsNote string) {
	s.String(&o.NATSAuth.User, "nats-user", "", userHelp)
	s.Var(&o.NATSAuth.Password, "nats-password", "password of --nats-user (use the environment: QUOTA_NATS_PASSWORD)")
	s.String(&o.NATSAuth.Creds, "nats-creds", "", "NATS credentials file (JWT auth)"+credsNote)
}

// declarePeriods declares the period flags of export and the sinks
// (events, sinks-report, stripe-sync); --month depends on --continuous
// (options.validate, parseStripeFlags).
func declarePeriods(s *settings.Set, o *options, granularityHelp string) {
	s.String(&o.Month, "month", "", "the UTC month, e.g. 2026-11 (required, except with --continuous)")
	s.String(&o.Granularity, "granularity", "month", granularityHelp).
		Check(func() error {
			return want(o.Granularity == "hour" || o.Granularity == "day" || o.Granularity == "month",
				"must be hour, day or month, got %q", o.Granularity)
		})
	declareStatementTimeout(s, o, "longest query of one page of keys")
	s.String(&o.Calendar, "calendar", "utc",
		"utc: UTC periods; plan: each key's periods on its plan's time_zone and anchor_day (a key without a mirrored plan: UTC), "+
			"those that start in the UTC --month. A sink's event ids follow the period start: choose a sink's calendar once").
		Check(func() error {
			return want(o.Calendar == "utc" || o.Calendar == "plan", "must be utc or plan, got %q", o.Calendar)
		})
}

// declareSink declares --sink (events, sinks-report); whether it is
// required is the command's (options.validate).
func declareSink(s *settings.Set, o *options) {
	s.String(&o.Sink, "sink", "", "where usage events go: http(s)://URL (CloudEvents over HTTP) or nats://SUBJECT (JetStream, on --nats)")
}

// declareSinkRun declares the flags of a sink run (events, stripe-sync).
func declareSinkRun(s *settings.Set, o *options) {
	s.Bool(&o.Continuous, "continuous", false,
		"run a pass every --every over the current UTC month until SIGTERM, instead of one run over --month")
	s.Duration(&o.Every, "every", time.Hour, "time between --continuous passes (1m to 24h)").
		Check(func() error {
			return want(o.Every >= time.Minute && o.Every <= 24*time.Hour, "must be 1m to 24h, got %v", o.Every)
		})
	s.Duration(&o.Lookback, "lookback", 0,
		"also correct periods starting this long before the range (0: 62 days, 72h for --granularity hour; negative: none)")
}

func declareMeter(s *settings.Set, o *stripeOptions) {
	s.String(&o.Meter, "meter", "", "the Stripe meter's event_name (required)").
		Check(func() error { return want(o.Meter != "", "required") })
}

// want is nil when ok, else the error of format and args: the check of a
// setting in one line.
func want(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}
