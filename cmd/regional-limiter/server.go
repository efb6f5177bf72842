package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/limitapi"
	"github.com/quotaplatform/quota/limitmetrics"
	"github.com/quotaplatform/quota/region"
)

// httpServer serves the API, metrics and health on --listen.
type httpServer struct {
	srv  *http.Server
	addr net.Addr // set by start
}

// Addr is the bound address, after start.
func (s *httpServer) Addr() string { return s.addr.String() }

type serverInputs struct {
	fx.In
	Lifecycle fx.Lifecycle
	Options   Options
	API       *limitapi.API
	Catalog   *catalog.Catalog
	Registry  *prometheus.Registry
	Limiter   *region.Limiter
	Log       *slog.Logger
	// DebugShares serves /debug/shares when the gossip module provides it.
	DebugShares http.Handler `name:"debug_shares" optional:"true"`
}

func newHTTPServer(in serverInputs) *httpServer {
	mux := http.NewServeMux()
	mux.Handle("/v1/", in.API)
	mux.Handle("GET /metrics", promhttp.HandlerFor(in.Registry, promhttp.HandlerOpts{Registry: in.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready := in.Catalog.Loaded()
		// A store outage does not make the process unready: it decides
		// in degraded mode, which the body reports.
		breaker := in.Limiter.Stats().Breaker
		body := map[string]any{
			"catalogue_loaded": ready,
			"catalogue_synced": in.Catalog.Synced(),
			"config_version":   in.Catalog.Version(),
			"breaker":          breaker.String(),
			"degraded":         breaker != region.BreakerClosed,
		}
		status := http.StatusOK
		if !ready {
			status = http.StatusServiceUnavailable
			body["reason"] = "the catalogue has neither been read from NATS nor loaded from the cache yet"
		}
		writeStatus(w, status, body)
	})
	if in.DebugShares != nil {
		mux.Handle("GET /debug/shares", in.DebugShares)
	} else {
		mux.HandleFunc("GET /debug/shares", func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, http.StatusNotImplemented, map[string]any{"error": "gossip is not wired into this build: every key's share is 1"})
		})
	}
	httpMetrics := limitmetrics.NewHTTP()
	in.Registry.MustRegister(httpMetrics)
	s := &httpServer{srv: &http.Server{
		Addr:              in.Options.Listen,
		Handler:           httpMetrics.Wrap(mux),
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(in.Log.Handler(), slog.LevelWarn),
	}}
	in.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", in.Options.Listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", in.Options.Listen, err)
			}
			s.addr = ln.Addr()
			in.Log.Info("serving", "addr", s.addr.String())
			go func() {
				if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					in.Log.Error("http server failed", "err", err)
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			// Stop taking requests first; the limiter drains after this.
			return s.srv.Shutdown(ctx)
		},
	})
	return s
}

func writeStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
