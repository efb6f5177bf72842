package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/quotaplatform/quota/internal/edge"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/quotaplatform/quota/internal/natsrole"
	"github.com/quotaplatform/quota/internal/tracing"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/planmirror"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/quotabase/pgledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/ledger/sink"
)

// serveModule wires the reconciler daemon: NATS → Reconciler → Postgres,
// and the HTTP endpoints. Constructors do no blocking I/O; lifecycle hooks
// start and stop the work.
func serveModule(o options, logger *slog.Logger) fx.Option {
	return fx.Options(
		fx.Supply(o, logger),
		fx.WithLogger(func(l *slog.Logger) fxevent.Logger {
			fl := &fxevent.SlogLogger{Logger: l}
			fl.UseLogLevel(slog.LevelDebug)
			return fl
		}),
		fx.Provide(
			newRegistry,
			newTracer,
			newNATS,
			newJetStream,
			newPool,
			newWriter,
			newReconciler,
			newCloser,
			newBillingPool,
			newBillingLedger,
			func(l *billing.Ledger) billing.Querier { return l },
			func(l *billing.Ledger) billing.QuotaQuerier { return l },
			newExporter,
			newQuotaBasePool,
			newQuotaBaseServer,
			newPlanMirror,
			newReadiness,
			newSchemaCheck,
			newRoutes,
			newMux,
		),
		fx.Invoke(runSchemaCheck, runReconciler, runCloser, runQuotaBase, runPlanMirror, serveHTTP),
	)
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newNATS connects to NATS; it does not fail when NATS is down (the client
// keeps retrying), so the reconciler starts and waits.
func newNATS(lc fx.Lifecycle, o options, log *slog.Logger) (*nats.Conn, error) {
	opts, err := natsOptions(o, log)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(o.NATS, opts...)
	if err != nil {
		return nil, fmt.Errorf("--nats %s: %w", redact(o.NATS), err)
	}
	lc.Append(fx.StopHook(nc.Close))
	return nc, nil
}

func natsOptions(o options, log *slog.Logger) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name("quota-reconciler"),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // our own Close, at a normal stop
				log.Debug("nats connection closed")
				return
			}
			log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "server", redact(nc.ConnectedUrl())) }),
	}
	// The reconciler's own inboxes: the shipped NATS configuration lets
	// it subscribe under its role's prefix only (natsrole).
	opts = append(opts, natsrole.Inbox(natsrole.Reconciler))
	opts = append(opts, o.NATSAuth.Options()...)
	return opts, nil
}

func newJetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

// newPool creates the Postgres pool; it connects lazily, so a Postgres that
// is down at start delays writes instead of failing the start.
func newPool(lc fx.Lifecycle, o options) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(o.Postgres)
	if err != nil {
		return nil, fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	// The Writer writes a batch's parts on --write-parallel connections at
	// once, and records dead letters on one more.
	cfg.MaxConns = max(cfg.MaxConns, int32(o.WriteParallel)+1)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	lc.Append(fx.StopHook(pool.Close))
	return pool, nil
}

// newWriter is the reconciler's Store: the Postgres Writer, writing each
// batch in up to --write-parallel parts at once.
func newWriter(o options, pool *pgxpool.Pool) (reconcile.Store, error) {
	cfg := reconcile.DefaultWriterConfig()
	cfg.Parallel = o.WriteParallel
	cfg.MaxNewPartitions = o.MaxNewPartitions
	w, err := reconcile.NewWriterWithConfig(pool, cfg)
	if err != nil {
		return nil, fmt.Errorf("--write-parallel, --max-new-partitions: %w", err)
	}
	return w, nil
}

// newTracer exports spans over OTLP when --otlp-endpoint is set (nil, no
// spans, otherwise) and flushes them on stop.
func newTracer(lc fx.Lifecycle, o options) (trace.Tracer, error) {
	tp, shutdown, err := tracing.Setup(tracing.Config{Endpoint: o.OTLPEndpoint, Service: "quota-reconciler"})
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	lc.Append(fx.StopHook(shutdown))
	if tp == nil {
		return nil, nil // tracing off: reconcile.Config takes nil as no spans
	}
	return tp.Tracer("github.com/quotaplatform/quota/ledger/reconcile"), nil
}

func newReconciler(o options, js jetstream.JetStream, store reconcile.Store, reg *prometheus.Registry, tracer trace.Tracer, log *slog.Logger) (*reconcile.Reconciler, error) {
	cfg := reconcile.DefaultConfig()
	cfg.Stream = usageStream(o, log)
	cfg.Durable = o.Durable
	regions, err := o.regions()
	if err != nil {
		return nil, fmt.Errorf("--regions: %w", err)
	}
	cfg.Regions = regions
	cfg.BatchSize = o.BatchSize
	cfg.BatchInterval = o.BatchInterval
	cfg.MaxReportAge, cfg.MaxReportSkew = o.MaxReportAge, o.MaxReportSkew
	cfg.RefundHorizon = o.RefundHorizon
	cfg.Logger = log
	cfg.Metrics = reconcile.NewMetrics(reg)
	cfg.Tracer = tracer
	return reconcile.New(js, store, cfg)
}

func runReconciler(lc fx.Lifecycle, r *reconcile.Reconciler, log *slog.Logger) {
	runInBackground(lc, "reconciler", r.Run, log)
}

// newCloser closes, through the writer's pool, the ledger rows of
// processes silent for --close-after past their window's end
// (reconcile.Closer), checking every min(30s, --close-after/4), and
// records this reconciler (--durable@host) as the closer.
func newCloser(o options, pool *pgxpool.Pool, reg *prometheus.Registry, log *slog.Logger) (*reconcile.Closer, error) {
	cfg := reconcile.DefaultCloserConfig()
	cfg.After = o.CloseAfter
	cfg.Interval = max(min(cfg.Interval, o.CloseAfter/4), 100*time.Millisecond)
	host, _ := os.Hostname()
	cfg.Name = o.Durable + "@" + host
	cfg.Logger = log
	cfg.Metrics = reconcile.NewCloserMetrics(reg)
	c, err := reconcile.NewCloser(pool, cfg)
	if err != nil {
		return nil, fmt.Errorf("--close-after: %w", err)
	}
	return c, nil
}

func runCloser(lc fx.Lifecycle, c *reconcile.Closer, log *slog.Logger) {
	runInBackground(lc, "window closer", c.Run, log)
}

// runInBackground runs run from the app's start until its stop, which
// cancels run's context and waits for it to return; an error other than
// the cancellation is logged as name's.
func runInBackground(lc fx.Lifecycle, name string, run func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() {
				defer close(done)
				if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
					log.Error(name+" stopped", "err", err)
				}
			}()
			return nil
		},
		OnStop: func(stop context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-stop.Done():
				return stop.Err()
			}
		},
	})
}

// billingPool is the usage queries' own pool (billing.NewPool), apart from
// the writer's *pgxpool.Pool: a slow or busy billing client cannot take
// the connections ingestion needs.
type billingPool struct{ *pgxpool.Pool }

func newBillingPool(lc fx.Lifecycle, o options) (billingPool, error) {
	pool, err := billing.NewPool(o.Postgres, o.billingConfig())
	if err != nil {
		return billingPool{}, fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	lc.Append(fx.StopHook(pool.Close))
	return billingPool{pool}, nil
}

func newBillingLedger(p billingPool, o options) (*billing.Ledger, error) {
	return billing.NewLedger(p.Pool, o.billingConfig())
}

// newExporter reads exports through the billing pool, a page of keys per
// query under --billing-statement-timeout.
func newExporter(p billingPool, o options) (*export.Exporter, error) {
	cfg := export.DefaultConfig()
	cfg.StatementTimeout = o.Billing.StatementTimeout
	return export.New(p.Pool, cfg)
}

// quotaBasePool is the quota-base queries' own pool (pgledger.NewPool):
// as many connections as queries may run at once, read-only, each query
// under the statement timeout, apart from the writer's and billing's.
type quotaBasePool struct{ *pgxpool.Pool }

func quotaBaseConfig(o options, reg *prometheus.Registry, log *slog.Logger) quotabase.Config {
	cfg := quotabase.DefaultConfig()
	cfg.Subject = o.QuotaBaseSubject
	cfg.Logger = log
	if reg != nil {
		cfg.Metrics = quotabase.NewMetrics(reg)
	}
	return cfg
}

func newQuotaBasePool(lc fx.Lifecycle, o options) (quotaBasePool, error) {
	pool, err := pgledger.NewPool(o.Postgres, quotaBaseConfig(o, nil, nil))
	if err != nil {
		return quotaBasePool{}, fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	lc.Append(fx.StopHook(pool.Close))
	return quotaBasePool{pool}, nil
}

// newQuotaBaseServer answers quota-base requests (docs/design.md [quotas])
// on --quota-base-subject from the ledger.
func newQuotaBaseServer(o options, nc *nats.Conn, p quotaBasePool, reg *prometheus.Registry, log *slog.Logger) (*quotabase.Server, error) {
	return quotabase.NewServer(nc, pgledger.New(p.Pool), quotaBaseConfig(o, reg, log))
}

// runQuotaBase subscribes on start; on stop, before the pool and NATS
// close, it unsubscribes and lets running queries answer.
func runQuotaBase(lc fx.Lifecycle, s *quotabase.Server) {
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return s.Start() },
		OnStop:  s.Stop,
	})
}

// newPlanMirror mirrors the catalogue's plans and key assignments from
// --catalog-bucket into the ledger through the writer's pool, for billing
// by period (docs/design.md [quotas]); nil when --catalog-bucket is empty.
func newPlanMirror(o options, js jetstream.JetStream, pool *pgxpool.Pool, reg *prometheus.Registry, log *slog.Logger) (*planmirror.Mirror, error) {
	if o.CatalogBucket == "" {
		return nil, nil
	}
	cfg := planmirror.DefaultConfig()
	cfg.Bucket = o.CatalogBucket
	cfg.Logger = log
	cfg.Metrics = planmirror.NewMetrics(reg)
	return planmirror.New(js, pool, cfg)
}

// runPlanMirror runs the mirror from start to stop. Its failures are its
// own (logged, retried, counted in quota_plan_mirror_failures_total):
// they do not fail /readyz, since ingestion does not need it.
func runPlanMirror(lc fx.Lifecycle, m *planmirror.Mirror, log *slog.Logger) {
	if m == nil {
		log.Info("catalogue plans are not mirrored into the ledger (--catalog-bucket is empty): billing by period answers from the last mirrored copy")
		return
	}
	runInBackground(lc, "plan mirror", m.Run, log)
}

// readiness is what /readyz answers besides the pool and the reconciler:
// it fails from the moment the daemon starts to stop.
type readiness struct{ draining atomic.Bool }

func newReadiness() *readiness { return &readiness{} }

// route is one entry of the reconciler's HTTP surface and who may call it.
// The mux is built from these routes alone (newMux); TestRoutes walks the
// real mux against them, and ledger/README.md lists them.
type route struct {
	pattern string // http.ServeMux pattern, method included (GET also answers HEAD)
	// token: the route needs a --billing-token (Authorization: Bearer);
	// otherwise anyone who reaches --listen may call it.
	token   bool
	caller  string // who calls it, for people
	handler http.Handler
}

// newRoutes is the reconciler's HTTP surface.
func newRoutes(o options, q billing.Querier, qq billing.QuotaQuerier, ex *export.Exporter, r *reconcile.Reconciler, pool *pgxpool.Pool, ready *readiness,
	schema *schemaCheck, reg *prometheus.Registry, log *slog.Logger) ([]route, error) {
	access, err := o.billingAccess()
	if err != nil {
		return nil, err
	}
	return []route{
		{"GET /v1/usage", true, "billing clients with a --billing-token; a prefix-scoped token reads only its keys",
			&billing.Handler{Ledger: q, Access: access, Logger: log}},
		{"GET /v1/usage/quotas", true, "billing clients with a --billing-token; a prefix-scoped token reads only its keys",
			&billing.QuotaHandler{Ledger: qq, Access: access, Logger: log}},
		{"GET /v1/usage/export", true, "billing clients with a --billing-token; a prefix-scoped token exports only its keys",
			&export.Handler{Exporter: ex, Access: access, WriteTimeout: o.Billing.StatementTimeout + writeTimeoutSlack, Logger: log}},
		{"GET /v1/usage/audit", true, "billing clients with a --billing-token; a prefix-scoped token reads only its keys",
			&sink.AuditHandler{DB: pool, Access: access, Logger: log}},
		{"GET /v1/usage/statement", true, "billing clients with a --billing-token for every key",
			&sink.StatementHandler{DB: pool, Exporter: ex, Access: access, Logger: log}},
		{"GET /metrics", false, "Prometheus", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})},
		{"GET /healthz", false, "liveness probe", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte("ok\n"))
		})},
		{"GET /readyz", false, "readiness probe, load balancer", readyz(r, pool, schema, ready)},
	}, nil
}

// readyz fails while the daemon drains, Postgres is unreachable, its
// schema is behind this binary's, or the reconciler is not consuming.
func readyz(r *reconcile.Reconciler, pool *pgxpool.Pool, schema *schemaCheck, ready *readiness) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if ready.draining.Load() {
			http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		err := pool.Ping(ctx)
		if err == nil {
			err = schema.check(ctx)
		}
		if err == nil {
			err = r.Ready()
		}
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	}
}

// newMux serves routes and nothing else.
func newMux(routes []route) *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.Handle(rt.pattern, rt.handler)
	}
	return mux
}

// HTTP server limits. writeTimeoutSlack is added to
// --billing-statement-timeout: the longest usage query, then its encoding.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeoutSlack = 10 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 16 << 10
)

func newHTTPServer(o options, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              o.Listen,
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      o.Billing.StatementTimeout + writeTimeoutSlack,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// serveHTTP serves mux on --listen. Stopping drains: /readyz fails at once,
// requests are served for --shutdown-delay more (so load balancers and
// probes see the failure and move traffic), then the server shuts down.
// fx stops it before the reconciler and the pools (hooks stop in reverse).
func serveHTTP(lc fx.Lifecycle, o options, mux *http.ServeMux, ready *readiness, log *slog.Logger) {
	srv := newHTTPServer(o, mux)
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			l, err := net.Listen("tcp", o.Listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", o.Listen, err)
			}
			log.Info("reconciler listening", "addr", l.Addr().String())
			go func() {
				defer close(done)
				if err := srv.Serve(edge.IdleUntilFirstByte(l, idleTimeout)); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("http server", "err", err)
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			ready.draining.Store(true)
			log.Info("draining: /readyz fails, serving until the shutdown delay ends", "shutdown_delay", o.ShutdownDelay)
			return edge.StopHTTP(ctx, srv, o.ShutdownDelay, done)
		},
	})
}

// usageStream is the usage stream's configuration from o.
func usageStream(o options, log *slog.Logger) ledger.StreamConfig {
	cfg := o.Stream
	cfg.Logger = log
	return cfg
}
