package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/limitapi"
	"github.com/quotaplatform/quota/limitmetrics"
	"github.com/quotaplatform/quota/region"
)

// appOptions is the daemon's fx graph. Usage sinks (the ledger reporter, the
// gossip node), the share source (gossip) and the process counter
// (membership) are optional inputs of the limiter config: a module that
// provides them is picked up without other changes, e.g.
//
//	fx.Provide(fx.Annotate(newReporter, fx.As(new(region.UsageSink)), fx.ResultTags(`group:"usage"`)))
//	fx.Provide(fx.Annotate(newGossip, fx.As(new(region.ShareSource))))
//	fx.Provide(fx.Annotate(newMembers, fx.As(new(region.ProcessCounter))))
//
// The graph provides *nats.Conn and jetstream.JetStream (connected, or
// reconnecting in the background) for such constructors, Options for their
// flags, clock.Clock (the wall clock, skewed by --clock-skew), *slog.Logger and
// *prometheus.Registry; a gossip module may also
// provide an http.Handler named "debug_shares" for /debug/shares. Pass the
// modules as extra. The HTTP surface is the routeTable (server.go).
func appOptions(o Options, logOut io.Writer, extra ...fx.Option) fx.Option {
	return fx.Options(
		fx.Supply(o),
		fx.Provide(
			func() (*slog.Logger, error) { return newLogger(o, logOut) },
			newRegistry,
			newClock,
			newStore,
			newNATSLink,
			provideNATSConn,
			provideJetStream,
			newCatalog,
			newObserver,
			newPlanResolver,
			newLimiterConfig,
			newLimiter,
			newAPI,
			newReadiness,
			newRoutes,
			newMux,
			newHTTPServer,
		),
		fx.WithLogger(func(log *slog.Logger) fxevent.Logger {
			l := &fxevent.SlogLogger{Logger: log.With("component", "fx")}
			l.UseLogLevel(slog.LevelDebug)
			return l
		}),
		// Stopping waits --shutdown-delay, then drains HTTP, the limiter
		// and the reporter.
		fx.StopTimeout(o.ShutdownDelay+20*time.Second),
		regionModules(o),
		grpcModules(o),
		fx.Options(extra...),
		fx.Invoke(func(*httpServer) {}),
	)
}

func newLogger(o Options, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})).
		With("region", o.Region, "process", o.ProcessID), nil
}

// newClock is the process's wall clock for the modules that stamp wall
// time (the ledger reporter): the system clock, its readings shifted by
// --clock-skew. The limiter does not read it: it takes the skew as
// region.Config.ClockOffset (newLimiterConfig), so that it keeps the coarse
// decision clock that only a nil Config.Clock gets.
func newClock(o Options, log *slog.Logger) clock.Clock {
	if o.ClockSkew == 0 {
		return clock.System()
	}
	log.Warn("wall clock skewed for testing", "clock_skew", o.ClockSkew)
	return shiftedClock{Clock: clock.System(), by: o.ClockSkew}
}

// shiftedClock is a clock whose readings are shifted by a fixed amount.
// Time.Add keeps the monotonic reading, so durations are unaffected; its
// tickers and timers are the underlying clock's.
type shiftedClock struct {
	clock.Clock
	by time.Duration
}

func (c shiftedClock) Now() time.Time { return c.Clock.Now().Add(c.by) }

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func newObserver(reg *prometheus.Registry) (*limitmetrics.Observer, error) {
	obs := limitmetrics.NewObserver()
	if err := reg.Register(obs); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return obs, nil
}

// newCatalog loads the last known good catalogue from <data-dir> and
// watches the bucket once NATS is connected.
func newCatalog(lc fx.Lifecycle, o Options, link *natsLink, js jetstream.JetStream, log *slog.Logger) (*catalog.Catalog, error) {
	cfg := catalog.DefaultConfig()
	cfg.CachePath = filepath.Join(o.DataDir, "catalog.json")
	cfg.Replicas, cfg.Cluster, cfg.ReadOnly = o.CatalogReplicas, o.CatalogCluster, !o.ControlPlane
	cfg.DefaultPlan = region.Plan{Rate: o.DefaultRate, Capacity: o.DefaultCapacity}
	if o.DefaultRate == 0 {
		log.Info("no built-in default plan: a key with no plan assignment gets 404 until a \"default\" plan is written" +
			" (with --redis it is off unless --default-rate or --default-capacity is given)")
	}
	cfg.Logger = log
	cat, err := catalog.New(cfg)
	if err != nil {
		return nil, err
	}
	link.OnReconnect(cat.Resync)
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if err := cat.Start(js); err != nil {
				return err
			}
			// Serve with a fresh catalogue when NATS answers quickly; never
			// fail the start over it (the cached copy, or the built-in
			// default, serves until the watch catches up).
			wait := 3 * time.Second
			if !link.nc.IsConnected() {
				wait = 100 * time.Millisecond
			}
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			if err := cat.WaitSynced(wctx); err != nil {
				log.Warn("starting without a fresh catalogue", "err", err, "loaded_from_cache", cat.Loaded())
			}
			return nil
		},
		OnStop: func(context.Context) error { cat.Stop(); return nil },
	})
	return cat, nil
}

// limiterInputs are the limiter config's inputs; the optional ones are
// provided by the ledger, gossip and membership modules when wired.
type limiterInputs struct {
	fx.In
	Options  Options
	Catalog  *catalog.Catalog
	Observer *limitmetrics.Observer
	// Usage sinks (the ledger reporter; the gossip node, which learns demand
	// from usage) join the group "usage"; each gets every batch.
	Usage     []region.UsageSink    `group:"usage"`
	Shares    region.ShareSource    `optional:"true"`
	Processes region.ProcessCounter `optional:"true"`
}

func newLimiterConfig(in limiterInputs) region.Config {
	cfg := region.DefaultConfig()
	cfg.Region = in.Options.Region
	cfg.StoreTimeout = in.Options.StoreTimeout
	cfg.Window = in.Options.Window
	cfg.ProcessEstimate = in.Options.Processes
	cfg.Costs = in.Catalog
	cfg.FlushInterval = time.Second
	cfg.Observer = in.Observer
	// Config.Clock stays nil, the only way to the coarse decision clock; the
	// limiter applies --clock-skew to its wall readings itself.
	cfg.ClockOffset = in.Options.ClockSkew
	switch len(in.Usage) {
	case 0:
	case 1:
		cfg.Usage = in.Usage[0]
	default:
		cfg.Usage = usageFanout(in.Usage)
	}
	cfg.Shares = in.Shares
	cfg.Processes = in.Processes
	return cfg
}

// newLimiter builds the limiter on plans (newPlanResolver), invalidates its
// leases on every catalogue change, and runs its background loop between
// start and stop. Stop cancels the loop and waits: it returns every lease
// and flushes usage.
func newLimiter(lc fx.Lifecycle, store region.Store, cat *catalog.Catalog, plans region.PlanResolver, cfg region.Config,
	reg *prometheus.Registry, log *slog.Logger) (*region.Limiter, error) {
	lim, err := region.New(store, plans, cfg)
	if err != nil {
		return nil, err
	}
	cat.Subscribe(lim)
	if err := reg.Register(limitmetrics.NewCollector(lim, cat)); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var (
		cancel context.CancelFunc
		done   = make(chan struct{})
	)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ctx, c := context.WithCancel(context.Background())
			cancel = c
			go func() {
				defer close(done)
				if err := lim.Run(ctx); err != nil {
					log.Error("limiter loop failed", "err", err)
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			cancel()
			select {
			case <-done:
				log.Info("limiter drained: leases returned, usage flushed")
				return nil
			case <-ctx.Done():
				return fmt.Errorf("limiter drain: %w", ctx.Err())
			}
		},
	})
	return lim, nil
}

// usageFanout hands every usage batch to several sinks, in order. Sinks
// must not modify the batch: they share it.
type usageFanout []region.UsageSink

func (f usageFanout) Record(batch []region.Usage) {
	for _, s := range f {
		s.Record(batch)
	}
}

func newAPI(o Options, lim *region.Limiter, cat *catalog.Catalog, shares *gossip.Node, reg *prometheus.Registry, log *slog.Logger) (*limitapi.API, error) {
	cfg := limitapi.DefaultConfig()
	cfg.Limiter, cfg.Catalog, cfg.AdminToken, cfg.Logger = lim, cat, string(o.AdminToken), log
	cfg.ReadOnly = !o.ControlPlane
	var err error
	if cfg.CheckTokens, err = bearer.ParseList(string(o.CheckToken)); err != nil {
		return nil, fmt.Errorf("--check-token: %w", err)
	}
	if cfg.ReadTokens, err = bearer.ParseList(string(o.ReadToken)); err != nil {
		return nil, fmt.Errorf("--read-token: %w", err)
	}
	cfg.Shares = shares
	checks := limitmetrics.NewChecks()
	if err := reg.Register(checks); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	cfg.Checks = checks
	if o.AdminToken == "" {
		log.Warn("no --admin-token: control-plane writes are disabled")
	}
	if o.AdminToken == "" && len(cfg.ReadTokens) == 0 {
		log.Warn("no --admin-token or --read-token: reads (GET /v1/keys, /v1/limits, /v1/costs, /debug/) are refused")
	}
	if len(cfg.CheckTokens) == 0 {
		log.Warn("no --check-token: the check API (/v1/allow) is open to anyone who reaches --listen")
	}
	return limitapi.New(cfg)
}
