package limitapi

import (
	"log/slog"
	"net/http"
)

// API serves the check API and the control plane. Create it with New.
type API struct {
	cfg           Config
	log           *slog.Logger
	checkGuard    guard
	readGuard     guard
	adminGuard    guard
	historyLimits *historyLimits
	mux           *http.ServeMux // Routes and ConcurrencyRoutes behind Guard
}

// New returns an API. It validates a copy of cfg.
func New(cfg Config) (*API, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.CheckTokens = append([]string(nil), cfg.CheckTokens...)
	cfg.ReadTokens = append([]string(nil), cfg.ReadTokens...)
	a := &API{cfg: cfg, log: cfg.Logger}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.newGuards()
	a.historyLimits = newHistoryLimits(cfg.HistoryRate, cfg.HistoryBurst, append([]string{cfg.AdminToken}, cfg.ReadTokens...)...)
	a.mux = a.Mux(append(a.Routes(), a.ConcurrencyRoutes()...))
	return a, nil
}

// ServeHTTP implements http.Handler for Routes and ConcurrencyRoutes,
// each behind Guard.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }
