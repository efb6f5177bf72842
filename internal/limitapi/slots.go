package limitapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/quotaplatform/quota/region"
)

// Slots is what the concurrency routes need of a region.Limiter
// (docs/design.md [plan-semantics]). The API serves POST /v1/acquire and
// /v1/release when Config.Limiter is one; otherwise they answer 501.
type Slots interface {
	Acquire(ctx context.Context, key, leaseID string) (region.Slot, error)
	Release(ctx context.Context, key, leaseID string) (bool, error)
}

// slotRequest is the body of POST /v1/acquire (lease_id optional: renew)
// and /v1/release (lease_id required).
type slotRequest struct {
	Key     string  `json:"key"`
	LeaseID *string `json:"lease_id"`
}

// slots returns the limiter's Slots, or answers 501.
func (a *API) slots(w http.ResponseWriter) Slots {
	s, ok := a.cfg.Limiter.(Slots)
	if !ok {
		(&apiError{status: http.StatusNotImplemented, msg: "this limiter holds no concurrency slots"}).write(w)
	}
	return s
}

// decodeSlot decodes a slot request; leaseRequired says lease_id must be
// given.
func (a *API) decodeSlot(w http.ResponseWriter, r *http.Request, leaseRequired bool) (key, id string, e *apiError) {
	var b slotRequest
	if e := decodeBody(w, r, a.cfg.MaxBodyBytes, &b); e != nil {
		return "", "", e
	}
	if ke := keyError(b.Key, ""); ke != nil {
		return "", "", ke
	}
	switch {
	case b.LeaseID != nil:
		id = *b.LeaseID
		if id == "" {
			return "", "", badRequest("lease_id", "lease_id must not be empty: leave it out to take a new slot")
		}
	case leaseRequired:
		return "", "", badRequest("lease_id", "lease_id is required: the id Acquire answered")
	}
	return b.Key, id, nil
}

// acquire serves POST /v1/acquire: take a concurrency slot of the key's
// plan, or renew the slot lease_id names.
func (a *API) acquire(w http.ResponseWriter, r *http.Request) {
	sl := a.slots(w)
	if sl == nil {
		return
	}
	key, id, e := a.decodeSlot(w, r, false)
	if e != nil {
		e.write(w)
		return
	}
	s, err := sl.Acquire(r.Context(), key, id)
	if err != nil {
		a.limiterError(err, "", key).write(w)
		return
	}
	if !s.Allowed {
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, ceilMillis(s.RetryAfter)/1000), 10))
	}
	writeRaw(w, http.StatusOK, append(appendSlot(nil, s), '\n'))
}

// appendSlot appends s as the acquire answer's JSON object.
func appendSlot(b []byte, s region.Slot) []byte {
	id, expires := "", int64(0)
	if s.Allowed {
		id, expires = s.ID, ceilMillis(s.Expires)
	}
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, s.Allowed)
	b = append(b, `,"lease_id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"expires_ms":`...)
	b = strconv.AppendInt(b, expires, 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, int64(s.Limit), 10)
	b = append(b, `,"held":`...)
	b = strconv.AppendInt(b, int64(s.Held), 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, ceilMillis(s.RetryAfter), 10)
	b = append(b, `,"degraded":`...)
	b = strconv.AppendBool(b, s.Degraded)
	if s.Degraded {
		b = append(b, `,"failure_policy":`...)
		b = appendJSONString(b, string(s.FailurePolicy))
	}
	return append(b, '}')
}

// release serves POST /v1/release: free the slot lease_id names.
func (a *API) release(w http.ResponseWriter, r *http.Request) {
	sl := a.slots(w)
	if sl == nil {
		return
	}
	key, id, e := a.decodeSlot(w, r, true)
	if e != nil {
		e.write(w)
		return
	}
	held, err := sl.Release(r.Context(), key, id)
	if err != nil {
		a.limiterError(err, "", key).write(w)
		return
	}
	writeRaw(w, http.StatusOK, []byte(`{"released":`+strconv.FormatBool(held)+"}\n"))
}
