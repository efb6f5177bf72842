package limitapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/region"
)

// checkRequest is one check: a key and either a cost or an endpoint whose
// weight is the cost. With neither the cost is 1.
type checkRequest struct {
	Key      string  `json:"key"`
	Cost     *int64  `json:"cost"`
	Endpoint *string `json:"endpoint"`
}

type batchRequest struct {
	Checks []checkRequest `json:"checks"`
}

// decide runs one check. prefix goes before field names ("checks[3].").
func (a *API) decide(ctx context.Context, c checkRequest, prefix string) (region.Decision, *apiError) {
	if err := catalog.CheckName("key", c.Key); err != nil {
		return region.Decision{}, badRequest(prefix+"key", "%v", err)
	}
	cost := int64(1)
	switch {
	case c.Cost != nil && c.Endpoint != nil:
		return region.Decision{}, badRequest(prefix+"endpoint", "give cost or endpoint, not both")
	case c.Cost != nil:
		cost = *c.Cost
		if cost <= 0 {
			return region.Decision{}, badRequest(prefix+"cost", "cost must be a positive integer, got %d", cost)
		}
	case c.Endpoint != nil:
		if err := catalog.CheckName("endpoint", *c.Endpoint); err != nil {
			return region.Decision{}, badRequest(prefix+"endpoint", "%v", err)
		}
		var err error
		if cost, err = a.cfg.Limiter.EndpointCost(*c.Endpoint); err != nil {
			return region.Decision{}, a.limiterError(err, prefix)
		}
	}
	d, err := a.cfg.Limiter.Allow(ctx, c.Key, cost)
	if err != nil {
		return region.Decision{}, a.limiterError(err, prefix)
	}
	return d, nil
}

func (a *API) limiterError(err error, prefix string) *apiError {
	status, field := httplimit.Classify(err)
	if status == http.StatusInternalServerError {
		a.log.Error("decision failed", "err", err)
		return &apiError{status: status, msg: "the limiter could not decide"}
	}
	return &apiError{status: status, field: prefix + field, msg: err.Error()}
}

// allow serves POST /v1/allow.
func (a *API) allow(w http.ResponseWriter, r *http.Request) {
	var c checkRequest
	if e := decodeBody(w, r, a.cfg.MaxBodyBytes, &c); e != nil {
		e.write(w)
		return
	}
	d, e := a.decide(r.Context(), c, "")
	if e != nil {
		e.write(w)
		return
	}
	var p httplimit.Policy
	p.Name, p.Plan, _ = a.cfg.Catalog.Resolve(c.Key)
	httplimit.WriteHeaders(w.Header(), p, d)
	writeRaw(w, http.StatusOK, append(appendDecision(make([]byte, 0, 160), d), '\n'))
}

// allowBatch serves POST /v1/allow/batch: every check in order, each
// answered with a decision or an error object.
func (a *API) allowBatch(w http.ResponseWriter, r *http.Request) {
	var br batchRequest
	if e := decodeBody(w, r, a.cfg.MaxBatchBytes, &br); e != nil {
		e.write(w)
		return
	}
	switch {
	case len(br.Checks) == 0:
		badRequest("checks", "checks must hold at least one check").write(w)
		return
	case len(br.Checks) > a.cfg.MaxBatch:
		(&apiError{status: http.StatusRequestEntityTooLarge, field: "checks",
			msg: "checks holds " + strconv.Itoa(len(br.Checks)) + " checks, at most " + strconv.Itoa(a.cfg.MaxBatch) + " allowed"}).write(w)
		return
	}
	b := make([]byte, 0, 32+len(br.Checks)*150)
	b = append(b, `{"results":[`...)
	for i, c := range br.Checks {
		if i > 0 {
			b = append(b, ',')
		}
		d, e := a.decide(r.Context(), c, "checks["+strconv.Itoa(i)+"].")
		if e != nil {
			b = appendError(b, e)
			continue
		}
		b = appendDecision(b, d)
	}
	b = append(b, "]}\n"...)
	writeRaw(w, http.StatusOK, b)
}

func appendError(b []byte, e *apiError) []byte {
	b = append(b, `{"error":`...)
	b = appendJSONString(b, e.msg)
	b = append(b, `,"field":`...)
	b = appendJSONString(b, e.field)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil {
		return append(b, `""`...)
	}
	return append(b, q...)
}
