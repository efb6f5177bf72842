package limitapi

import (
	"net/http"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/catalog"
)

// Access says who may call a route. Guard enforces it.
type Access uint8

const (
	// AccessAnyone: no token is read; anyone who reaches the listener may
	// call the route.
	AccessAnyone Access = iota
	// AccessCheck: a check token (Config.CheckTokens) when any is
	// configured; anyone when none is.
	AccessCheck
	// AccessRead: a read token (Config.ReadTokens) or the admin token. With
	// neither configured, no one (403).
	AccessRead
	// AccessAdmin: the admin token. Without one, no one (403).
	AccessAdmin
)

// String says who may call, for people.
func (a Access) String() string {
	switch a {
	case AccessAnyone:
		return "anyone"
	case AccessCheck:
		return "check token when configured"
	case AccessRead:
		return "read or admin token"
	case AccessAdmin:
		return "admin token"
	}
	return "no one"
}

// Route is one entry of an HTTP surface: its http.ServeMux pattern (method
// included; GET also answers HEAD), who may call it, and its handler,
// which does not check tokens itself: Mux puts it behind Guard.
type Route struct {
	Pattern string
	Access  Access
	// Caller says who calls the route, for people.
	Caller  string
	Handler http.Handler
}

// Routes is the API's HTTP surface: the check API and the control plane.
// The daemon adds its own routes (metrics, health) and builds one mux with
// Mux.
func (a *API) Routes() []Route {
	return []Route{
		{"POST /v1/allow", AccessCheck, "services: one check", http.HandlerFunc(a.allow)},
		{"POST /v1/allow/batch", AccessCheck, "services: many checks", http.HandlerFunc(a.allowBatch)},
		{"POST /v1/refund", AccessCheck, "services: give back a request's cost (it failed upstream), once per request_id", http.HandlerFunc(a.refund)},
		{"POST /v1/charge", AccessCheck, "services: charge cost known after a request (e.g. tokens), once per request_id", http.HandlerFunc(a.charge)},
		{"GET /v1/limits/{plan}", AccessRead, "operators, dashboards: a plan (?history=1: its changes)", http.HandlerFunc(a.getPlan)},
		{"PUT /v1/limits/{plan}", AccessAdmin, "operators: create or change a plan", http.HandlerFunc(a.putPlan)},
		{"DELETE /v1/limits/{plan}", AccessAdmin, "operators: delete a plan no key is assigned to", a.deleteEntry(catalog.KindPlan, "plan")},
		{"GET /v1/keys/{key}", AccessRead, "operators, dashboards: a key's plan and state (?history=1: its assignments)", http.HandlerFunc(a.getKey)},
		{"PUT /v1/keys/{key}", AccessAdmin, "operators: assign a key a plan", http.HandlerFunc(a.putKey)},
		{"DELETE /v1/keys/{key}", AccessAdmin, "operators: send a key back to the default plan", a.deleteEntry(catalog.KindKey, "key")},
		{"GET /v1/costs/{endpoint}", AccessRead, "operators, dashboards: an endpoint's cost (?history=1: its changes)", http.HandlerFunc(a.getCost)},
		{"PUT /v1/costs/{endpoint}", AccessAdmin, "operators: set an endpoint's cost", http.HandlerFunc(a.putCost)},
		{"DELETE /v1/costs/{endpoint}", AccessAdmin, "operators: send an endpoint back to the default cost", a.deleteEntry(catalog.KindCost, "endpoint")},
	}
}

// ConcurrencyRoutes are the concurrency-slot routes (docs/design.md
// [plan-semantics]): POST /v1/acquire and /v1/release, for check tokens.
// They are kept apart from Routes so that a daemon adds them to its route
// table together with the table's documentation; the API's own ServeHTTP
// serves both.
func (a *API) ConcurrencyRoutes() []Route {
	return []Route{
		{"POST /v1/acquire", AccessCheck, "services: take or renew a concurrency slot", http.HandlerFunc(a.acquire)},
		{"POST /v1/release", AccessCheck, "services: free a concurrency slot", http.HandlerFunc(a.release)},
	}
}

// Mux serves routes and nothing else, each behind Guard.
func (a *API) Mux(routes []Route) *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.Handle(rt.Pattern, a.Guard(rt.Access, rt.Handler))
	}
	return mux
}

// Guard returns h behind the tokens access asks for, compared as SHA-256
// digests in constant time. A request without "Authorization: Bearer
// <token>" is answered 401 with WWW-Authenticate: Bearer; a token that is
// not one of the route's is answered 403; a route whose tokens are not
// configured (reads, writes) is answered 403. An unknown Access refuses
// everyone.
func (a *API) Guard(access Access, h http.Handler) http.Handler {
	switch access {
	case AccessAnyone:
		return h
	case AccessCheck:
		if len(a.checkGuard.tokens) == 0 {
			return h
		}
		return a.checkGuard.wrap(h)
	case AccessRead:
		return a.readGuard.wrap(h)
	case AccessAdmin:
		if a.cfg.ReadOnly {
			h = readOnly
		}
		return a.adminGuard.wrap(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		(&apiError{status: http.StatusForbidden, field: "Authorization", msg: "this route has no access rule"}).write(w)
	})
}

// readOnly answers a write on a process that is not the control plane.
var readOnly = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	(&apiError{status: http.StatusForbidden, msg: "this process does not write the catalogue: " +
		"send plan, key and cost changes to the control plane (a regional-limiter started with --control-plane)"}).write(w)
})

// guard is the token check of one Access.
type guard struct {
	tokens   bearer.Set
	disabled string // the 403 message when tokens is empty
	missing  string // the 401 message
	wrong    string // the 403 message
}

func (g *guard) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(g.tokens) == 0 {
			(&apiError{status: http.StatusForbidden, field: "Authorization", msg: g.disabled}).write(w)
			return
		}
		tok, ok := bearer.FromHeader(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="quota"`)
			(&apiError{status: http.StatusUnauthorized, field: "Authorization", msg: g.missing}).write(w)
			return
		}
		if g.tokens.Index(tok) < 0 {
			(&apiError{status: http.StatusForbidden, field: "Authorization", msg: g.wrong}).write(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// newGuards builds the guards of the configured tokens.
func (a *API) newGuards() {
	a.checkGuard = guard{
		tokens:  bearer.NewSet(a.cfg.CheckTokens...),
		missing: "checks need an Authorization: Bearer <check token> header",
		wrong:   "wrong check token",
	}
	a.readGuard = guard{
		tokens:   bearer.NewSet(append([]string{a.cfg.AdminToken}, a.cfg.ReadTokens...)...),
		disabled: "reads are disabled: the daemon was started without a read token (--read-token) or an admin token (--admin-token)",
		missing:  "reads need an Authorization: Bearer <read token or admin token> header",
		wrong:    "wrong token: not a read token or the admin token",
	}
	a.adminGuard = guard{
		tokens:   bearer.NewSet(a.cfg.AdminToken),
		disabled: "control-plane writes are disabled: the daemon was started without an admin token (--admin-token)",
		missing:  "writes need an Authorization: Bearer <admin token> header",
		wrong:    "wrong admin token",
	}
}
