package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/internal/limitmetrics"
	"github.com/quotaplatform/quota/region"
)

// appOptions is the daemon's fx graph: the participant (participantModule,
// which fixes the order in which the store, NATS, catalogue, gossip,
// membership, ledger reporter and limiter start and stop), and on it the
// HTTP surface (the routeTable, server.go) and, with --grpc-listen, Envoy's
// rate limit service (grpcModules).
//
// The graph provides the participant's parts for other constructors:
// *region.Limiter, its region.Config, *catalog.Catalog, *gossip.Node,
// *nats.Conn and jetstream.JetStream; also Options for their flags,
// *slog.Logger and *prometheus.Registry. A module may add usage sinks to the
// group "usage" (see participantModule). Pass the modules as extra.
func appOptions(o Options, logOut io.Writer, extra ...fx.Option) fx.Option {
	return fx.Options(
		fx.Supply(o),
		fx.Provide(
			func() (*slog.Logger, error) { return newLogger(o, logOut) },
			newRegistry,
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
		fx.StopTimeout(stopTimeout(o)),
		participantModule(),
		grpcModules(o),
		fx.Options(extra...),
		fx.Invoke(func(*httpServer) {}),
	)
}

func newLogger(o Options, w io.Writer) (*slog.Logger, error) {
	log, err := edge.NewLogger(w, o.LogLevel)
	if err != nil {
		return nil, err
	}
	return log.With("region", o.Region, "process", o.ProcessID), nil
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func newAPI(o Options, lim *region.Limiter, cat *catalog.Catalog, shares *gossip.Node, checks *limitmetrics.Checks, log *slog.Logger) (*limitapi.API, error) {
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

// stopTimeout is the whole stop's deadline. Stopping runs in this order,
// each step on a budget of its own: the HTTP server keeps serving for
// --shutdown-delay, then drains its requests in flight for at most
// --drain-timeout; the gRPC server drains its calls for at most
// --drain-timeout; then the participant closes, the limiter's last flush
// and the final usage reports on --flush-timeout (participant.Close), and
// last the tracer flushes its spans. fx runs no stop hook once this
// deadline has passed, so it covers every budget with a margin: a drain
// that spends its own can no longer take the participant's.
func stopTimeout(o Options) time.Duration {
	return o.ShutdownDelay + 2*o.DrainTimeout + o.FlushTimeout + stopMargin
}

// stopMargin covers the stop steps without a budget of their own
// (membership, catalogue, gossip, connections, the tracer's flush).
const stopMargin = 10 * time.Second
