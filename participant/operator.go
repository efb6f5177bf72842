package participant

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/internal/limitmetrics"
)

// Checks is the check-latency histogram (quota_check_duration_seconds),
// registered on Options.Registerer; nil without one. Middleware reports to
// it; a service with its own check endpoint passes it on
// (limitapi.Config.Checks).
func (p *Participant) Checks() *limitmetrics.Checks { return p.checks }

// SharesHandler serves GET /debug/shares: every key's share per region,
// each region's gossip age and whether shares are frozen
// (gossip.Node.Snapshot); with ?key=K, K's shares alone. Put it behind
// operators' authentication: it names keys.
func (p *Participant) SharesHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := r.URL.Query().Get("key"); key != "" {
			writeJSON(w, http.StatusOK, map[string]any{"key": key, "shares": p.node.Shares(key)})
			return
		}
		writeJSON(w, http.StatusOK, p.node.Snapshot())
	})
}

// HotKeysHandler serves GET /v1/hotkeys?region=&k=: the fleet's (or one
// region's) k hottest keys from the gossip digests, with each key's
// demand, admitted rate and part of the demand (gossip.Node.HotKeys). k is
// 1 to 1000, default 10; region, when given, must be one of the region
// set. Put it behind operators' authentication: it names keys.
func (p *Participant) HotKeysHandler() http.Handler {
	regions, _ := p.opts.RegionSet() // validated by New
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		k := 10
		if v := q.Get("k"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": "k must be an integer from 1 to 1000", "field": "k"})
				return
			}
			k = n
		}
		reg := q.Get("region")
		if reg != "" && !slices.Contains(regions, reg) {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "region is not one of the region set", "field": "region"})
			return
		}
		writeJSON(w, http.StatusOK, p.node.HotKeys(reg, k))
	})
}

// MountOperatorRoutes adds the read-only operator surface of a service
// that embeds a participant to mux, as the daemon serves it: a key's plan
// and state (GET /v1/keys/{key}, with the regions' shares), a plan
// (GET /v1/limits/{plan}), an endpoint's cost (GET /v1/costs/{endpoint}),
// GET /debug/shares and GET /v1/hotkeys. Every route needs one of
// readTokens ("Authorization: Bearer <token>", several for rotation;
// bearer.Check says what a token must be): without one a call is answered
// 401, with another token 403, and with no readTokens every call 403.
// Writes stay with the control plane. It returns the routes it added, for
// the service's route documentation and tests.
func (p *Participant) MountOperatorRoutes(mux *http.ServeMux, readTokens []string) ([]limitapi.Route, error) {
	cfg := limitapi.DefaultConfig()
	cfg.Limiter, cfg.Catalog, cfg.Shares, cfg.Logger = p.lim, p.cat, p.node, p.log
	cfg.ReadTokens, cfg.ReadOnly = readTokens, true
	api, err := limitapi.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("participant: operator routes: %w", err)
	}
	var routes []limitapi.Route
	for _, rt := range api.Routes() {
		if rt.Access == limitapi.AccessRead {
			routes = append(routes, rt)
		}
	}
	routes = append(routes,
		limitapi.Route{Pattern: "GET /debug/shares", Access: limitapi.AccessRead, Caller: "operators: every key's region shares (?key=K: one key's)",
			Handler: p.SharesHandler()},
		limitapi.Route{Pattern: "GET /v1/hotkeys", Access: limitapi.AccessRead, Caller: "operators: the fleet's hottest keys (?region=R&k=N)",
			Handler: p.HotKeysHandler()},
	)
	for _, rt := range routes {
		mux.Handle(rt.Pattern, api.Guard(rt.Access, rt.Handler))
	}
	return routes, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
