package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/internal/limitmetrics"
	"github.com/quotaplatform/quota/internal/tracing"
	"github.com/quotaplatform/quota/participant"
)

// routeTable is the daemon's whole HTTP surface and who may call each
// route: the API's routes (limitapi.API.Routes) and the daemon's own. The
// mux is built from it alone (newMux); TestRoutes walks the real mux
// against it, and README.md in this directory lists it.
type routeTable []limitapi.Route

type routeInputs struct {
	fx.In
	API         *limitapi.API
	Participant *participant.Participant
	Registry    *prometheus.Registry
	Ready       *readiness
	Logger      *slog.Logger
	// DebugShares serves /debug/shares when the gossip module provides it.
	DebugShares http.Handler `name:"debug_shares" optional:"true"`
	// HotKeys serves /v1/hotkeys.
	HotKeys http.Handler `name:"hot_keys" optional:"true"`
}

func newRoutes(in routeInputs) routeTable {
	debugShares := in.DebugShares
	if debugShares == nil {
		debugShares = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, http.StatusNotImplemented, map[string]any{"error": "gossip is not wired into this build: every key's share is 1"})
		})
	}
	hotKeys := in.HotKeys
	if hotKeys == nil {
		hotKeys = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, http.StatusNotImplemented, map[string]any{"error": "gossip is not wired into this build"})
		})
	}
	routes := append(routeTable(in.API.Routes()), in.API.ConcurrencyRoutes()...)
	routes = append(routes, rlsRoutes(in.Participant.Catalog(), in.Logger)...)
	return append(routes,
		limitapi.Route{Pattern: "GET /metrics", Access: limitapi.AccessAnyone, Caller: "Prometheus (no keys in labels)",
			Handler: promhttp.HandlerFor(in.Registry, promhttp.HandlerOpts{Registry: in.Registry})},
		limitapi.Route{Pattern: "GET /healthz", Access: limitapi.AccessAnyone, Caller: "liveness probe",
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeStatus(w, http.StatusOK, map[string]any{"status": "ok"})
			})},
		limitapi.Route{Pattern: "GET /readyz", Access: limitapi.AccessAnyone, Caller: "readiness probe, load balancer",
			Handler: readyz(in.Participant, in.Ready)},
		limitapi.Route{Pattern: "GET /debug/shares", Access: limitapi.AccessRead, Caller: "operators: every key's region shares (?key=K: one key's)",
			Handler: debugShares},
		limitapi.Route{Pattern: "GET /v1/hotkeys", Access: limitapi.AccessRead, Caller: "operators: the fleet's hottest keys (?region=R&k=N)",
			Handler: hotKeys},
	)
}

// newMux serves the route table and nothing else, each route behind the
// API's token check for its Access.
func newMux(api *limitapi.API, routes routeTable) *http.ServeMux {
	return api.Mux(routes)
}

// readiness is what /readyz answers besides the catalogue: it fails from
// the moment the daemon starts to stop.
type readiness struct{ draining atomic.Bool }

func newReadiness() *readiness { return &readiness{} }

// readyz is 200 once the catalogue is loaded, 503 before and while the
// daemon drains. A store outage does not make the process unready: it
// decides in degraded mode, which the body reports.
func readyz(p *participant.Participant, ready *readiness) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := p.Health()
		body := map[string]any{
			"catalogue_loaded": h.CatalogueLoaded,
			"catalogue_synced": h.CatalogueSynced,
			"config_version":   h.ConfigVersion,
			"breaker":          h.Breaker,
			"degraded":         h.Degraded,
		}
		status := http.StatusOK
		switch {
		case ready.draining.Load():
			status = http.StatusServiceUnavailable
			body["reason"] = "shutting down"
		case !h.Ready:
			status = http.StatusServiceUnavailable
			body["reason"] = h.Reason
		}
		writeStatus(w, status, body)
	}
}

// httpServer serves the route table on --listen.
type httpServer struct {
	srv  *http.Server
	addr net.Addr // set by start
}

// Addr is the bound address, after start.
func (s *httpServer) Addr() string { return s.addr.String() }

// HTTP server limits.
const (
	readHeaderTimeout = 2 * time.Second
	readTimeout       = 5 * time.Second
	writeTimeout      = 10 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 16 << 10
)

// newHTTPServer serves mux on --listen between start and stop. Stopping
// drains: /readyz fails at once and each connection closes after its next
// answer (closing idle keep-alive connections at once would race a client
// that just picked one for a POST, which it cannot retry), requests are served
// for --shutdown-delay more (so that load balancers and probes see the
// failure and move traffic), then the server shuts down, waiting for the
// requests in flight for at most --drain-timeout. fx stops it before the
// limiter, the reporter and NATS (hooks stop in reverse order of start;
// see stopTimeout).
func newHTTPServer(lc fx.Lifecycle, o Options, mux *http.ServeMux, ready *readiness,
	reg *prometheus.Registry, log *slog.Logger) *httpServer {
	httpMetrics := limitmetrics.NewHTTP()
	reg.MustRegister(httpMetrics)
	var handler http.Handler = mux
	if o.OTLPEndpoint != "" {
		handler = tracing.Handler(mux) // spans of a check join its caller's trace
	}
	s := &httpServer{srv: &http.Server{
		Addr:              o.Listen,
		Handler:           httpMetrics.Wrap(closeWhileDraining(ready, handler)),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", o.Listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", o.Listen, err)
			}
			s.addr = ln.Addr()
			log.Info("serving", "addr", s.addr.String())
			go func() {
				defer close(done)
				if err := s.srv.Serve(edge.IdleUntilFirstByte(ln, idleTimeout)); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("http server failed", "err", err)
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			ready.draining.Store(true)
			log.Info("draining: /readyz fails, serving until the shutdown delay ends", "shutdown_delay", o.ShutdownDelay)
			// Its own budget, so that a slow request cannot spend the
			// limiter's last flush's (stopTimeout).
			ctx, cancel := context.WithTimeout(ctx, o.ShutdownDelay+o.DrainTimeout)
			defer cancel()
			return edge.StopHTTP(ctx, s.srv, o.ShutdownDelay, done)
		},
	})
	return s
}

func writeStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// closeWhileDraining answers with Connection: close once draining has
// begun, so that clients move to another instance one request at a time.
func closeWhileDraining(ready *readiness, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ready.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}
