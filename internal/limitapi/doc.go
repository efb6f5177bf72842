// Package limitapi is the regional limiter daemon's HTTP API: the check API
// for services that cannot import the region library, and the control plane
// that writes the plan catalogue.
//
// Check API: POST /v1/allow with {"key":…,"cost":…} or {"key":…,"endpoint":…}
// answers 200 with the decision as JSON and as response fields (see
// httplimit.WriteHeaders); POST /v1/allow/batch takes {"checks":[…]} and
// answers {"results":[…]} in the same order, each a decision or an error.
// A decision taken while the store was unavailable says "degraded":true and
// the plan's "failure_policy"; a shadow plan's would-be rejection says
// "shadow_rejected":true (docs/design.md [plan-semantics]).
//
// Request ids (docs/design.md [idempotency]): a check (single or in a
// batch) with "request_id" is charged once per id within the region's
// idempotency horizon, and a retry answers "replayed":true with the first
// decision. POST /v1/refund and POST /v1/charge {"key","cost","request_id"}
// (in Routes, for check tokens) give back a failed request's cost, at most
// what its id was charged, and charge cost known after the response, into
// debt if need be, each once per id. They need a Limiter that takes
// request ids (Requests; a *region.Limiter does), else they answer 501.
//
// Concurrency slots (API.ConcurrencyRoutes, for check tokens): POST
// /v1/acquire {"key"} takes a slot of the key's plan and answers
// {"allowed","lease_id","expires_ms",…}; with "lease_id" it renews that
// slot; POST /v1/release {"key","lease_id"} frees it. They need a Limiter
// with slots (Slots; a *region.Limiter has them), else they answer 501.
//
// Control plane: PUT/GET/DELETE /v1/limits/{plan} (rate, capacity and the
// optional failure_policy, mode, shadow and concurrency), PUT/GET/DELETE
// /v1/keys/{key}, PUT/GET/DELETE /v1/costs/{endpoint}; a GET with
// ?history=1 lists who changed the entry and when, deletions included, at
// most Config.HistoryRate a second per caller (429 past it). A plan that
// keys are assigned to is not deleted (409).
//
// Who may call: API.Routes lists every route with its Access, and Mux
// serves a route table (the daemon adds its own routes) behind Guard.
// Checks need "Authorization: Bearer <check token>" when Config.CheckTokens
// is set and are open otherwise; reads need a read token or the admin
// token; writes and deletions the admin token. A missing token is 401
// (WWW-Authenticate: Bearer), a wrong one 403. Tokens are kept as SHA-256
// digests and compared in constant time; several check or read tokens may
// be valid at once, for rotation (bearer.ParseList reads a list).
//
// Bad input (malformed JSON, a field of the wrong type, an unknown field, an
// empty, oversized or non-printable key, a cost ≤ 0 or above the plan's
// capacity, an unknown plan, a missing or wrong token, an oversized body)
// answers 4xx with {"error":…,"field":…} naming the field.
//
// Limit keys are not logged above debug level: an error that names one is
// logged with <key> in its place (httplimit.RedactKey).
//
// It owns no goroutine; its state is its Config and the history rate
// limiters, read (time.Now) when a history is asked for. It is safe for
// concurrent use.
package limitapi
