package region

import (
	"errors"
	"fmt"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// DefaultIdempotencyHorizon is Config.IdempotencyHorizon's default.
const DefaultIdempotencyHorizon = 24 * time.Hour

// Errors of request ids.
var (
	// ErrInvalidRequestID: a request id is longer than store.MaxRequestIDLen
	// bytes, or holds a byte that is not printable ASCII (or a space).
	ErrInvalidRequestID = errors.New("invalid request id")
	// ErrNoIdempotency: the Limiter's store records no request ids (it is
	// not a store.RequestStore).
	ErrNoIdempotency = errors.New("the store records no request ids")
	// ErrUnknownRequest: a refund names a request id the region holds no
	// record of (never charged, or older than the horizon).
	ErrUnknownRequest = errors.New("unknown request id")
	// ErrRefundExceedsCharge: a refund is larger than what its request id
	// was charged.
	ErrRefundExceedsCharge = errors.New("refund exceeds the charge")
	// ErrRequestConflict: the request id was already refunded or charged
	// with another cost.
	ErrRequestConflict = errors.New("request id already used with another cost")
)

// CheckRequestID reports whether id can be a request id: 1 to
// store.MaxRequestIDLen bytes of printable ASCII without spaces. The error
// wraps ErrInvalidRequestID and names the field request_id.
func CheckRequestID(id string) error {
	if len(id) > store.MaxRequestIDLen {
		return fmt.Errorf("%w: request_id is %d bytes, at most %d allowed", ErrInvalidRequestID, len(id), store.MaxRequestIDLen)
	}
	return CheckName(ErrInvalidRequestID, "request_id", id)
}
