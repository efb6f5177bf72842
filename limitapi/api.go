package limitapi

import (
	"crypto/sha256"
	"log/slog"
	"net/http"

	"github.com/quotaplatform/quota/catalog"
)

// API serves the check API and the control plane. Create it with New.
type API struct {
	cfg       Config
	log       *slog.Logger
	tokenHash *[sha256.Size]byte // nil: writes are disabled
	mux       *http.ServeMux
}

// New returns an API. It validates a copy of cfg.
func New(cfg Config) (*API, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &API{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux()}
	if a.log == nil {
		a.log = slog.Default()
	}
	if cfg.AdminToken != "" {
		h := sha256.Sum256([]byte(cfg.AdminToken))
		a.tokenHash = &h
	}
	a.mux.HandleFunc("POST /v1/allow", a.allow)
	a.mux.HandleFunc("POST /v1/allow/batch", a.allowBatch)
	a.mux.HandleFunc("PUT /v1/limits/{plan}", a.putPlan)
	a.mux.HandleFunc("GET /v1/limits/{plan}", a.getPlan)
	a.mux.HandleFunc("PUT /v1/keys/{key}", a.putKey)
	a.mux.HandleFunc("GET /v1/keys/{key}", a.getKey)
	a.mux.HandleFunc("PUT /v1/costs/{endpoint}", a.putCost)
	a.mux.HandleFunc("GET /v1/costs/{endpoint}", a.getCost)
	a.mux.HandleFunc("DELETE /v1/limits/{plan}", a.deleteEntry(catalog.KindPlan, "plan"))
	a.mux.HandleFunc("DELETE /v1/keys/{key}", a.deleteEntry(catalog.KindKey, "key"))
	a.mux.HandleFunc("DELETE /v1/costs/{endpoint}", a.deleteEntry(catalog.KindCost, "endpoint"))
	return a, nil
}

// ServeHTTP implements http.Handler for the routes under /v1/.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }
