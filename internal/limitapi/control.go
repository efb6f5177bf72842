package limitapi

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/period"
)

// writeError answers a failed catalogue write. key is the key the write
// was about ("" for a plan or an endpoint): it is kept out of logs above
// debug level.
func (a *API) writeError(w http.ResponseWriter, err error, field, key string) {
	switch {
	case errors.Is(err, catalog.ErrUnavailable):
		a.logFailure(slog.LevelWarn, "catalogue write failed", err, key)
		(&apiError{status: http.StatusServiceUnavailable, msg: "the catalogue cannot be written now (NATS unreachable); retry later"}).write(w)
	case errors.Is(err, limit.ErrUnknownPlan):
		(&apiError{status: http.StatusBadRequest, field: "plan", msg: err.Error()}).write(w)
	case errors.Is(err, catalog.ErrInvalidName), errors.Is(err, catalog.ErrInvalidValue):
		badRequest(field, "%v", err).write(w)
	case errors.Is(err, catalog.ErrNotFound):
		(&apiError{status: http.StatusNotFound, field: field, msg: err.Error()}).write(w)
	case errors.Is(err, catalog.ErrInUse):
		(&apiError{status: http.StatusConflict, field: field, msg: err.Error()}).write(w)
	default:
		a.logFailure(slog.LevelError, "catalogue write failed", err, key)
		(&apiError{status: http.StatusInternalServerError, msg: "the catalogue write failed"}).write(w)
	}
}

// pathName reads and checks a path wildcard.
func pathName(r *http.Request, wildcard string) (string, *apiError) {
	v := r.PathValue(wildcard)
	if err := catalog.CheckName(wildcard, v); err != nil {
		return "", badRequest(wildcard, "%v", err)
	}
	return v, nil
}

type planBody struct {
	Rate          *float64 `json:"rate"`
	Capacity      *float64 `json:"capacity"`
	FailurePolicy *string  `json:"failure_policy"`
	Mode          *string  `json:"mode"`
	Shadow        *bool    `json:"shadow"`
	Concurrency   *int     `json:"concurrency"`
	// Quotas are the plan's calendar quotas (docs/design.md [quotas]),
	// counted in TimeZone's calendar with months from AnchorDay.
	Quotas    []quotaBody `json:"quotas"`
	TimeZone  *string     `json:"time_zone"`
	AnchorDay *int        `json:"anchor_day"`
}

type quotaBody struct {
	Period *string `json:"period"`
	Limit  *int64  `json:"limit"`
}

// planSemantics is a plan's semantics as plan and key answers show them
// (docs/design.md [plan-semantics]), with the defaults spelled out.
type planSemantics struct {
	FailurePolicy limit.FailurePolicy `json:"failure_policy"`
	Mode          limit.Mode          `json:"mode"`
	Shadow        bool                `json:"shadow"`
	Concurrency   int                 `json:"concurrency"`
	// Quotas, with their calendar: absent when the plan has none.
	Quotas    []limit.Quota `json:"quotas,omitempty"`
	TimeZone  string        `json:"time_zone,omitempty"`
	AnchorDay int           `json:"anchor_day,omitempty"`
}

func semanticsOf(p limit.Plan) planSemantics {
	s := planSemantics{FailurePolicy: p.Policy(), Mode: cmp.Or(p.Mode, limit.ModeLeased), Shadow: p.Shadow, Concurrency: p.Concurrency}
	if p.HasQuotas() {
		s.Quotas = p.QuotaList()
		s.TimeZone, s.AnchorDay = cmp.Or(p.TimeZone, "UTC"), max(p.AnchorDay, 1)
	}
	return s
}

type planAnswer struct {
	Plan     string  `json:"plan"`
	Rate     float64 `json:"rate"`
	Capacity float64 `json:"capacity"`
	planSemantics
	Actor     string    `json:"actor"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	Revision  uint64    `json:"revision,omitempty"`
}

// putPlan serves PUT /v1/limits/{plan}.
func (a *API) putPlan(w http.ResponseWriter, r *http.Request) {
	name, e := pathName(r, "plan")
	if e != nil {
		e.write(w)
		return
	}
	var b planBody
	if e := decodeBody(w, r, a.cfg.MaxBodyBytes, &b); e != nil {
		e.write(w)
		return
	}
	switch {
	case b.Rate == nil:
		e = badRequest("rate", "rate is required (cost units per second)")
	case b.Capacity == nil:
		e = badRequest("capacity", "capacity is required (burst, cost units)")
	}
	if e != nil {
		e.write(w)
		return
	}
	p, e := b.plan()
	if e != nil {
		e.write(w)
		return
	}
	if _, err := a.cfg.Catalog.PutPlan(r.Context(), a.cfg.AdminActor, name, p); err != nil {
		a.writeError(w, err, "plan", "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// plan is the body as a plan, checked by limit's rules (Plan.Validate,
// NewQuotas): the answer names the field they name. Only what JSON
// cannot say by itself (a field present) is checked here.
func (b planBody) plan() (limit.Plan, *apiError) {
	p := limit.Plan{Rate: *b.Rate, Capacity: *b.Capacity}
	if b.FailurePolicy != nil {
		p.FailurePolicy = limit.FailurePolicy(*b.FailurePolicy)
	}
	if b.Mode != nil {
		p.Mode = limit.Mode(*b.Mode)
	}
	if b.Shadow != nil {
		p.Shadow = *b.Shadow
	}
	if b.Concurrency != nil {
		p.Concurrency = *b.Concurrency
	}
	if b.TimeZone != nil {
		p.TimeZone = *b.TimeZone
	}
	if b.AnchorDay != nil {
		p.AnchorDay = *b.AnchorDay
	}
	qs := make([]limit.Quota, len(b.Quotas))
	for i, q := range b.Quotas {
		field := fmt.Sprintf("quotas[%d]", i)
		switch {
		case q.Period == nil:
			return p, badRequest(field+".period", "%s.period is required: hour, day, week or month", field)
		case q.Limit == nil:
			return p, badRequest(field+".limit", "%s.limit is required: an integer in [1, %d] cost units per period", field, int64(limit.MaxQuota))
		}
		qs[i] = limit.Quota{Period: period.Unit(*q.Period), Limit: *q.Limit}
	}
	// The bucket's fields first, as a client reads the body, then the
	// quotas, then the two together (no quotas on an exact plan).
	err := p.Validate()
	if err == nil {
		if p.Quotas, err = limit.NewQuotas(qs); err == nil {
			err = p.Validate()
		}
	}
	if err != nil {
		var fe *limit.FieldError
		if errors.As(err, &fe) {
			return p, badRequest(fe.Field, "%s", fe.Reason)
		}
		return p, badRequest("plan", "%v", err)
	}
	return p, nil
}

// getPlan serves GET /v1/limits/{plan}.
func (a *API) getPlan(w http.ResponseWriter, r *http.Request) {
	name, e := pathName(r, "plan")
	if e != nil {
		e.write(w)
		return
	}
	if wantHistory(r) {
		a.history(w, r, catalog.KindPlan, name)
		return
	}
	p, ok := a.cfg.Catalog.PlanEntry(name)
	if !ok {
		(&apiError{status: http.StatusNotFound, field: "plan", msg: "plan " + quote(name) + " does not exist"}).write(w)
		return
	}
	writeJSON(w, http.StatusOK, planAnswer{Plan: name, Rate: p.Rate, Capacity: p.Capacity, planSemantics: semanticsOf(p.RegionPlan()),
		Actor: p.Actor, UpdatedAt: p.At, Revision: p.Revision})
}

type keyBody struct {
	Plan *string `json:"plan"`
}

// putKey serves PUT /v1/keys/{key}.
func (a *API) putKey(w http.ResponseWriter, r *http.Request) {
	key, e := pathName(r, "key")
	if e != nil {
		e.write(w)
		return
	}
	var b keyBody
	if e := decodeBody(w, r, a.cfg.MaxBodyBytes, &b); e != nil {
		e.write(w)
		return
	}
	if b.Plan == nil {
		badRequest("plan", "plan is required").write(w)
		return
	}
	if err := catalog.CheckName("plan", *b.Plan); err != nil {
		badRequest("plan", "%v", err).write(w)
		return
	}
	if _, err := a.cfg.Catalog.Assign(r.Context(), a.cfg.AdminActor, key, *b.Plan); err != nil {
		a.writeError(w, err, "key", key)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type keyAnswer struct {
	Key      string  `json:"key"`
	Plan     string  `json:"plan"`
	Rate     float64 `json:"rate"`
	Capacity float64 `json:"capacity"`
	planSemantics
	Remaining int64 `json:"remaining"`
	StaleMS   int64 `json:"stale_ms"`
	// Assigned: the key has its own assignment (else it uses "default").
	Assigned bool `json:"assigned"`
	// Tracked: this process holds state for the key; when false, Remaining
	// is the plan's capacity (the key spent nothing here lately).
	Tracked  bool `json:"tracked"`
	Degraded bool `json:"degraded"`
	// LocalShare is this process's share of the key's traffic in its region,
	// which sizes its degraded bucket; absent when not tracked.
	LocalShare *float64 `json:"local_share,omitempty"`
	// Shares is each region's share of the key's global limit, and
	// SharesAgeMS the age of that computation (gossip); absent without it.
	Shares      map[string]float64 `json:"shares,omitempty"`
	SharesAgeMS *int64             `json:"shares_age_ms,omitempty"`
}

// getKey serves GET /v1/keys/{key}.
func (a *API) getKey(w http.ResponseWriter, r *http.Request) {
	key, e := pathName(r, "key")
	if e != nil {
		e.write(w)
		return
	}
	if wantHistory(r) {
		a.history(w, r, catalog.KindKey, key)
		return
	}
	name, plan, err := a.cfg.Catalog.Resolve(key)
	if err != nil {
		(&apiError{status: http.StatusNotFound, field: "key", msg: err.Error()}).write(w)
		return
	}
	_, assigned := a.cfg.Catalog.Assignment(key)
	ans := keyAnswer{Key: key, Plan: name, Rate: plan.Rate, Capacity: plan.Capacity, Remaining: int64(plan.Capacity), Assigned: assigned,
		planSemantics: semanticsOf(plan)}
	if ks, err := a.cfg.Limiter.Peek(key); err == nil {
		ans.Tracked, ans.StaleMS, ans.Degraded = true, ks.Stale.Milliseconds(), ks.Degraded
		ans.LocalShare = &ks.LocalShare
		// Until the key's next decision re-leases after a plan change, its
		// state may still count against the old plan's larger capacity.
		ans.Remaining = min(ks.Remaining, int64(plan.Capacity))
	}
	if a.cfg.Shares != nil {
		ans.Shares = a.cfg.Shares.Shares(key)
		age := a.cfg.Shares.SharesAge().Milliseconds()
		ans.SharesAgeMS = &age
	}
	writeJSON(w, http.StatusOK, ans)
}

type costBody struct {
	Cost *int64 `json:"cost"`
}

type costAnswer struct {
	Endpoint  string    `json:"endpoint"`
	Cost      int64     `json:"cost"`
	Default   bool      `json:"default"` // no weight is set: the endpoint costs the default
	Actor     string    `json:"actor,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	Revision  uint64    `json:"revision,omitempty"`
}

// putCost serves PUT /v1/costs/{endpoint}.
func (a *API) putCost(w http.ResponseWriter, r *http.Request) {
	ep, e := pathName(r, "endpoint")
	if e != nil {
		e.write(w)
		return
	}
	var b costBody
	if e := decodeBody(w, r, a.cfg.MaxBodyBytes, &b); e != nil {
		e.write(w)
		return
	}
	switch {
	case b.Cost == nil:
		e = badRequest("cost", "cost is required (a positive integer)")
	case *b.Cost < 1 || *b.Cost > limit.MaxCapacity:
		e = badRequest("cost", "cost must be an integer in [1, %g], got %d", float64(limit.MaxCapacity), *b.Cost)
	}
	if e != nil {
		e.write(w)
		return
	}
	if _, err := a.cfg.Catalog.PutCost(r.Context(), a.cfg.AdminActor, ep, *b.Cost); err != nil {
		a.writeError(w, err, "cost", "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getCost serves GET /v1/costs/{endpoint}.
func (a *API) getCost(w http.ResponseWriter, r *http.Request) {
	ep, e := pathName(r, "endpoint")
	if e != nil {
		e.write(w)
		return
	}
	if wantHistory(r) {
		a.history(w, r, catalog.KindCost, ep)
		return
	}
	if c, ok := a.cfg.Catalog.CostEntry(ep); ok {
		writeJSON(w, http.StatusOK, costAnswer{Endpoint: ep, Cost: c.Cost, Actor: c.Actor, UpdatedAt: c.At, Revision: c.Revision})
		return
	}
	cost, err := a.cfg.Limiter.EndpointCost(ep)
	if err != nil {
		(&apiError{status: http.StatusNotFound, field: "endpoint", msg: err.Error()}).write(w)
		return
	}
	writeJSON(w, http.StatusOK, costAnswer{Endpoint: ep, Cost: cost, Default: true})
}

// deleteEntry serves DELETE /v1/limits/{plan}, /v1/keys/{key} (the key's
// assignment: it goes back to the default plan) and /v1/costs/{endpoint}
// (the endpoint goes back to the default cost). A plan that keys are
// assigned to is not deleted (409).
func (a *API) deleteEntry(kind catalog.Kind, wildcard string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, e := pathName(r, wildcard)
		if e != nil {
			e.write(w)
			return
		}
		if _, err := a.cfg.Catalog.Delete(r.Context(), a.cfg.AdminActor, kind, name); err != nil {
			key := ""
			if kind == catalog.KindKey {
				key = name
			}
			a.writeError(w, err, wildcard, key)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func quote(s string) string { return `"` + s + `"` }
