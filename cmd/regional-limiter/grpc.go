package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/rls"
)

// grpcModules serves Envoy's rate limit service on --grpc-listen, with the
// limits of --rls-config (envoyproxy/ratelimit's YAML), reloaded when the
// files change, or, with --rls-config catalog:, the rules stored in the
// catalogue (PUT /v1/rls/{domain}), re-applied on every push. Off (no
// module) without --grpc-listen.
//
// The rules join the graph before the participant: its limiter answers
// their keys (rls.KeyPrefix) from them and every other key from the
// catalogue (newParticipant). The gRPC server is built before the HTTP
// server, so it starts before it and stops after it: it keeps serving
// through --shutdown-delay.
func grpcModules(o Options) fx.Option {
	if o.GRPCListen == "" {
		return fx.Options()
	}
	invokes := []any{linkRLS}
	if o.RLSConfig == rlsFromCatalog {
		invokes = append(invokes, watchRLSCatalog) // after linkRLS: its loads invalidate the limiter
	}
	return fx.Options(
		fx.Provide(newRLSRules, newRLSService, newGRPCServer),
		fx.Invoke(append(invokes, func(*grpcServer) {})...),
	)
}

// rlsFromCatalog is the --rls-config that takes the rules from the
// catalogue's rate limit service domains.
const rlsFromCatalog = "catalog:"

// watchRLSCatalog puts the catalogue's rate limit service domains in force
// now (from the cached copy, if any) and after every push
// (rls.WatchCatalog); a domain whose entry does not parse is logged,
// naming its line and field, counted in quota_rls_config_loads_total
// {result="error"}, and keeps its last good rules. It runs before the
// participant starts the catalogue.
func watchRLSCatalog(cat *catalog.Catalog, rules *rls.Rules, metrics *rls.Metrics, link *rlsLink, log *slog.Logger) error {
	log = log.With("component", "rls")
	return rls.WatchCatalog(rls.CatalogWatchConfig{
		Catalog: cat,
		Rules:   rules,
		OnLoad: func(c *rls.Config) {
			link.lim.InvalidateAll()
			metrics.ConfigLoaded(nil)
			log.Info("rate limit rules from the catalogue in force", "domains", c.Domains(), "generation", rules.Generation())
		},
		OnError: func(err error) {
			metrics.ConfigLoaded(err)
			log.Warn("rate limit rules in the catalogue refused; the domain's last good rules stay in force", "err", err)
		},
	})
}

// rlsLink lets the config watcher reach the limiter, which is built after
// the rules (its plan resolver reads them).
type rlsLink struct{ lim *region.Limiter }

func linkRLS(link *rlsLink, lim *region.Limiter) { link.lim = lim }

// newRLSRules loads --rls-config (the daemon does not start on an invalid
// one) and polls it every second between start and stop: a changed and
// valid configuration is put in force and every key re-leases under it; an
// invalid one is logged, naming file, line and field, and the last good
// one stays.
func newRLSRules(lc fx.Lifecycle, o Options, reg *prometheus.Registry, log *slog.Logger) (*rls.Rules, *rls.Metrics, *rlsLink, error) {
	metrics, err := rls.NewMetrics(reg)
	if err != nil {
		return nil, nil, nil, err
	}
	rules, link := &rls.Rules{}, &rlsLink{}
	log = log.With("component", "rls")
	if o.RLSConfig == rlsFromCatalog {
		return rules, metrics, link, nil // watchRLSCatalog fills rules
	}
	w, cfg, err := rls.NewWatcher(rls.WatchConfig{
		Path: o.RLSConfig,
		OnLoad: func(c *rls.Config) {
			rules.Set(c)
			link.lim.InvalidateAll()
			metrics.ConfigLoaded(nil)
			log.Info("rate limit config reloaded", "files", c.Files, "domains", c.Domains(), "generation", rules.Generation())
		},
		OnError: func(err error) {
			metrics.ConfigLoaded(err)
			log.Warn("rate limit config refused; the last good one stays in force", "err", err)
		},
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--rls-config: %w", err)
	}
	rules.Set(cfg)
	metrics.ConfigLoaded(nil)
	log.Info("rate limit config loaded", "files", cfg.Files, "domains", cfg.Domains())
	var (
		cancel context.CancelFunc
		done   = make(chan struct{})
	)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ctx, c := context.WithCancel(context.Background())
			cancel = c
			go func() { defer close(done); w.Run(ctx) }()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("rls config watcher: %w", ctx.Err())
			}
		},
	})
	return rules, metrics, link, nil
}

func newRLSService(o Options, lim *region.Limiter, rules *rls.Rules, metrics *rls.Metrics, log *slog.Logger) (*rls.Service, error) {
	return rls.New(rls.ServiceConfig{
		Limiter:         lim,
		Rules:           rules,
		ResponseHeaders: o.RLSResponseHeaders,
		Metrics:         metrics,
		Logger:          log.With("component", "rls"),
	})
}

// grpcServer serves the rate limit service, health and reflection on
// --grpc-listen.
type grpcServer struct {
	srv    *grpc.Server
	health *health.Server
	addr   net.Addr // set by start
}

// Addr is the bound address, after start.
func (s *grpcServer) Addr() string { return s.addr.String() }

// maxGRPCMessage bounds a request, as the HTTP batch body is bounded.
const maxGRPCMessage = 1 << 20

// newGRPCServer serves svc between start and stop. With --check-token
// every method (health and reflection included) needs one of the check
// tokens. Stopping reports NOT_SERVING on health, then stops gracefully
// (in-flight calls finish) within --drain-timeout, then hard.
func newGRPCServer(lc fx.Lifecycle, o Options, svc *rls.Service, log *slog.Logger) (*grpcServer, error) {
	tokens, err := bearer.ParseList(string(o.CheckToken))
	if err != nil {
		return nil, fmt.Errorf("--check-token: %w", err)
	}
	if len(tokens) == 0 {
		log.Warn("no --check-token: the gRPC rate limit service is open to anyone who reaches --grpc-listen")
	}
	srv, hs := rls.NewGRPCServer(svc, tokens, grpc.MaxRecvMsgSize(maxGRPCMessage))
	s := &grpcServer{srv: srv, health: hs}
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", o.GRPCListen)
			if err != nil {
				return fmt.Errorf("--grpc-listen %s: %w", o.GRPCListen, err)
			}
			s.addr = ln.Addr()
			log.Info("serving gRPC", "addr", s.addr.String())
			go func() {
				defer close(done)
				if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
					log.Error("grpc server failed", "err", err)
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			// Its own budget, as the HTTP server's (stopTimeout).
			ctx, cancel := context.WithTimeout(ctx, o.DrainTimeout)
			defer cancel()
			hs.Shutdown()
			stopped := make(chan struct{})
			go func() { defer close(stopped); srv.GracefulStop() }()
			select {
			case <-stopped:
			case <-ctx.Done():
				srv.Stop()
				<-stopped
			}
			<-done
			return nil
		},
	})
	return s, nil
}
