package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/reconcile"
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
			newNATS,
			newJetStream,
			newPool,
			func(p *pgxpool.Pool) reconcile.Store { return reconcile.NewWriter(p) },
			newReconciler,
			func(p *pgxpool.Pool) billing.Querier { return billing.NewLedger(p) },
			newMux,
		),
		fx.Invoke(runReconciler, serveHTTP),
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
			log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "server", redact(nc.ConnectedUrl())) }),
	}
	if o.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(o.NATSCreds))
	}
	if o.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(o.NATSTLSCA))
	}
	if o.NATSTLSCert != "" {
		opts = append(opts, nats.ClientCert(o.NATSTLSCert, o.NATSTLSKey))
	}
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
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	lc.Append(fx.StopHook(pool.Close))
	return pool, nil
}

func newReconciler(o options, js jetstream.JetStream, store reconcile.Store, reg *prometheus.Registry, log *slog.Logger) (*reconcile.Reconciler, error) {
	cfg := reconcile.DefaultConfig()
	cfg.Stream = ledger.DefaultStreamConfig()
	cfg.Stream.Name = o.Stream
	cfg.Durable = o.Durable
	cfg.BatchSize = o.BatchSize
	cfg.BatchInterval = o.BatchInterval
	cfg.Logger = log
	cfg.Metrics = reconcile.NewMetrics(reg)
	return reconcile.New(js, store, cfg)
}

func runReconciler(lc fx.Lifecycle, r *reconcile.Reconciler, log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() {
				defer close(done)
				if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
					log.Error("reconciler stopped", "err", err)
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

func newMux(q billing.Querier, r *reconcile.Reconciler, pool *pgxpool.Pool, reg *prometheus.Registry, log *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/v1/usage", &billing.Handler{Ledger: q, Logger: log})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		err := pool.Ping(ctx)
		if err == nil {
			err = r.Ready()
		}
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}

func serveHTTP(lc fx.Lifecycle, o options, mux *http.ServeMux, log *slog.Logger) {
	srv := &http.Server{Addr: o.Listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			l, err := net.Listen("tcp", o.Listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", o.Listen, err)
			}
			log.Info("reconciler listening", "addr", l.Addr().String())
			go func() {
				if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("http server", "err", err)
				}
			}()
			return nil
		},
		OnStop: srv.Shutdown,
	})
}
