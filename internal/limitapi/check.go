package limitapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

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
	// RequestID, when given, makes the check idempotent: docs/design.md
	// [idempotency].
	RequestID *string `json:"request_id"`
}

type batchRequest struct {
	Checks []checkRequest `json:"checks"`
}

// check is a decoded checkRequest without pointers, so that one decoded
// on the stack stays there.
type check struct {
	key, endpoint, requestID           string
	cost                               int64
	hasCost, hasEndpoint, hasRequestID bool
}

func (c checkRequest) check() check {
	k := check{key: c.Key}
	if c.Cost != nil {
		k.cost, k.hasCost = *c.Cost, true
	}
	if c.Endpoint != nil {
		k.endpoint, k.hasEndpoint = *c.Endpoint, true
	}
	if c.RequestID != nil {
		k.requestID, k.hasRequestID = *c.RequestID, true
	}
	return k
}

// decide runs one check. prefix goes before field names ("checks[3].").
// The key is validated once, by Allow; a bad key is named before any other
// bad field.
func (a *API) decide(ctx context.Context, c *check, prefix string) (region.Decision, *apiError) {
	cost, e := a.cost(c, prefix)
	if e != nil {
		if ke := keyError(c.key, prefix); ke != nil {
			return region.Decision{}, ke
		}
		return region.Decision{}, e
	}
	var d region.Decision
	var err error
	if c.hasRequestID {
		d, err = a.allowRequest(ctx, c, cost)
	} else {
		d, err = a.cfg.Limiter.Allow(ctx, c.key, cost)
	}
	if err != nil {
		if errors.Is(err, region.ErrInvalidKey) {
			if ke := keyError(c.key, prefix); ke != nil {
				return region.Decision{}, ke
			}
		}
		return region.Decision{}, a.limiterError(err, prefix, c.key)
	}
	return d, nil
}

// allowRequest decides a check that carries a request id.
func (a *API) allowRequest(ctx context.Context, c *check, cost int64) (region.Decision, error) {
	if c.requestID == "" {
		return region.Decision{}, fmt.Errorf("%w: request_id must not be empty: leave it out for a check without one", region.ErrInvalidRequestID)
	}
	rq, ok := a.cfg.Limiter.(Requests)
	if !ok {
		return region.Decision{}, fmt.Errorf("%w: this limiter records no request ids", region.ErrNoIdempotency)
	}
	return rq.AllowRequest(ctx, c.key, cost, c.requestID)
}

// cost is the check's cost: given, the endpoint's weight, or 1.
func (a *API) cost(c *check, prefix string) (int64, *apiError) {
	switch {
	case c.hasCost && c.hasEndpoint:
		return 0, badRequest(prefix+"endpoint", "give cost or endpoint, not both")
	case c.hasCost:
		if c.cost <= 0 {
			return 0, badRequest(prefix+"cost", "cost must be a positive integer, got %d", c.cost)
		}
		return c.cost, nil
	case c.hasEndpoint:
		if err := catalog.CheckName("endpoint", c.endpoint); err != nil {
			return 0, badRequest(prefix+"endpoint", "%v", err)
		}
		cost, err := a.cfg.Limiter.EndpointCost(c.endpoint)
		if err != nil {
			return 0, a.limiterError(err, prefix, c.key)
		}
		return cost, nil
	}
	return 1, nil
}

// keyError is the answer to a bad key, nil for a good one. It is worded as
// the control plane words a bad name (catalog.ErrInvalidName), as the check
// API always has; the rule is region.CheckKey's. It runs only on the error
// paths of decide: Allow validated the key of every check that got that far.
func keyError(key, prefix string) *apiError {
	if err := catalog.CheckName("key", key); err != nil {
		return badRequest(prefix+"key", "%v", err)
	}
	return nil
}

// limiterError is the answer to a limiter error in a check of key.
func (a *API) limiterError(err error, prefix, key string) *apiError {
	status, field := httplimit.Classify(err)
	if status == http.StatusInternalServerError {
		a.logFailure(slog.LevelError, "decision failed", err, key)
		return &apiError{status: status, msg: "the limiter could not decide"}
	}
	return &apiError{status: status, field: prefix + field, msg: err.Error()}
}

// allow serves POST /v1/allow. The body is read into a pooled buffer and
// decoded by hand (decodeCheck), and the answer is written from the same
// buffer: a check allocates its key, its header values and nothing else
// of its own.
func (a *API) allow(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	buf := getBuf()
	defer putBuf(buf)
	c, e := decodeCheck(w, r, a.cfg.MaxBodyBytes, buf)
	if e != nil {
		e.write(w)
		return
	}
	d, e := a.decide(r.Context(), &c, "")
	if e != nil {
		e.write(w)
		return
	}
	// The decision carries the plan it was taken against: no second lookup.
	plan := d.Plan()
	httplimit.WriteHeaders(w.Header(), httplimit.Policy{Name: plan.Name, Plan: plan}, d)
	buf.b = append(appendDecision(buf.b[:0], d), '\n')
	writeRaw(w, http.StatusOK, buf.b)
	if a.cfg.Checks != nil {
		a.cfg.Checks.ObserveCheck(d.Path, time.Since(t0))
	}
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
	results := a.decideAll(r.Context(), br.Checks)
	b := make([]byte, 0, 32+len(br.Checks)*150)
	b = append(b, `{"results":[`...)
	for i, res := range results {
		if i > 0 {
			b = append(b, ',')
		}
		if res.err != nil {
			b = appendError(b, res.err)
			continue
		}
		b = appendDecision(b, res.d)
	}
	b = append(b, "]}\n"...)
	writeRaw(w, http.StatusOK, b)
}

// A batch is decided in order on the request's goroutine. Checks that miss
// their lease wait for a store round trip, so once a batch has taken
// spreadAfter and at least 2×checksPerWorker checks remain, the rest are
// spread over up to maxBatchWorkers goroutines to overlap those waits.
// With an in-process store a batch of 100 takes tens of microseconds and
// never spreads.
const (
	spreadAfter     = 200 * time.Microsecond
	checksPerWorker = 16
	maxBatchWorkers = 8
)

type checkResult struct {
	d   region.Decision
	err *apiError
}

// decideAll decides a batch. Checks of one key are decided in the order
// given: those before the spread point are all done before it, and after
// it each key belongs to one goroutine, which takes its checks in order.
func (a *API) decideAll(ctx context.Context, checks []checkRequest) []checkResult {
	out := make([]checkResult, len(checks))
	decide := func(i int) {
		c := checks[i].check()
		out[i].d, out[i].err = a.decide(ctx, &c, "checks["+strconv.Itoa(i)+"].")
	}
	deadline := time.Now().Add(spreadAfter)
	i := 0
	for ; i < len(checks); i++ {
		if i%8 == 7 && len(checks)-i >= 2*checksPerWorker && time.Now().After(deadline) {
			break
		}
		decide(i)
	}
	rest := len(checks) - i
	if rest == 0 {
		return out
	}
	workers := min(maxBatchWorkers, (rest+checksPerWorker-1)/checksPerWorker)
	owner := make([]uint8, rest)
	for j := range owner {
		owner[j] = uint8(fnv32(checks[i+j].Key) % uint32(workers))
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for j, o := range owner {
				if int(o) == w {
					decide(i + j)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// fnv32 is FNV-1a, to spread keys over a batch's goroutines.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
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
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return append(b, `""`...)
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
