package limitapi

import (
	"net/http"
	"strconv"

	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/store"
)

// adjustRequest is the body of POST /v1/refund and /v1/charge: every field
// is required.
type adjustRequest struct {
	Key       string  `json:"key"`
	Cost      *int64  `json:"cost"`
	RequestID *string `json:"request_id"`
}

// refund serves POST /v1/refund: give cost back to the key's bucket for a
// request that failed upstream, at most what its request_id was charged,
// once per request_id (docs/design.md [idempotency]).
func (a *API) refund(w http.ResponseWriter, r *http.Request) { a.adjust(w, r, store.RequestRefund) }

// charge serves POST /v1/charge: take cost known only after a request was
// served, without a decision, into debt if need be, once per request_id.
func (a *API) charge(w http.ResponseWriter, r *http.Request) { a.adjust(w, r, store.RequestCharge) }

func (a *API) adjust(w http.ResponseWriter, r *http.Request, op store.RequestOp) {
	rq, ok := a.cfg.Limiter.(Requests)
	if !ok {
		(&apiError{status: http.StatusNotImplemented, field: "request_id", msg: "this limiter records no request ids"}).write(w)
		return
	}
	var b adjustRequest
	if e := decodeBody(w, r, a.cfg.MaxBodyBytes, &b); e != nil {
		e.write(w)
		return
	}
	if ke := keyError(b.Key, ""); ke != nil {
		ke.write(w)
		return
	}
	switch {
	case b.Cost == nil:
		badRequest("cost", "cost is required: the cost units to %s", op).write(w)
		return
	case *b.Cost <= 0:
		badRequest("cost", "cost must be a positive integer, got %d", *b.Cost).write(w)
		return
	case b.RequestID == nil || *b.RequestID == "":
		badRequest("request_id", "request_id is required: the id of the request to %s", op).write(w)
		return
	}
	if err := region.CheckRequestID(*b.RequestID); err != nil {
		badRequest("request_id", "%v", err).write(w)
		return
	}
	var adj region.Adjustment
	var err error
	if op == store.RequestRefund {
		adj, err = rq.Refund(r.Context(), b.Key, *b.Cost, *b.RequestID)
	} else {
		adj, err = rq.Charge(r.Context(), b.Key, *b.Cost, *b.RequestID)
	}
	if err != nil {
		a.limiterError(err, "", b.Key).write(w)
		return
	}
	writeRaw(w, http.StatusOK, append(appendAdjustment(nil, adj), '\n'))
}

// appendAdjustment appends adj as the refund and charge answer's JSON
// object.
func appendAdjustment(b []byte, adj region.Adjustment) []byte {
	b = append(b, `{"replayed":`...)
	b = strconv.AppendBool(b, adj.Replayed)
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, adj.Cost, 10)
	b = append(b, `,"charged":`...)
	b = strconv.AppendInt(b, adj.Charged, 10)
	b = append(b, `,"refunded":`...)
	b = strconv.AppendInt(b, adj.Refunded, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, adj.Remaining, 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, adj.Limit, 10)
	return append(b, '}')
}
