package httplimit

import (
	"context"
	"fmt"
	"net/http"

	"github.com/quotaplatform/quota/region"
)

// IdempotencyHeader is the request header the middleware reads a request
// id from (docs/design.md [idempotency]): a request retried with the same
// value within the region's idempotency horizon is charged once, and is
// admitted or refused as the first was.
const IdempotencyHeader = "Idempotency-Key"

// RequestLimiter is a Limiter that charges a request id once
// (region.Limiter.AllowRequest). The middleware uses it for requests that
// carry IdempotencyHeader; with a Limiter that is not one, the header is
// ignored and every retry is charged.
type RequestLimiter interface {
	AllowRequest(ctx context.Context, key string, cost int64, requestID string) (region.Decision, error)
}

// allow decides r: by its Idempotency-Key when it has one and the limiter
// takes request ids, else as a plain check. A header that cannot be a
// request id is an error wrapping region.ErrInvalidRequestID (400).
func allow(l Limiter, r *http.Request, key string, cost int64) (region.Decision, error) {
	v := r.Header[IdempotencyHeader] // canonical already: no Get
	if len(v) == 0 || v[0] == "" {
		return l.Allow(r.Context(), key, cost)
	}
	id := v[0]
	rl, ok := l.(RequestLimiter)
	if !ok {
		return l.Allow(r.Context(), key, cost)
	}
	if err := region.CheckRequestID(id); err != nil {
		return region.Decision{}, fmt.Errorf("%s header: %w", IdempotencyHeader, err)
	}
	return rl.AllowRequest(r.Context(), key, cost, id)
}
