package region

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// RequestStore records request ids on the region's store, so that a check,
// a refund or a post-hoc charge sent again with the same request id is
// applied once (docs/design.md [idempotency]). RedisStore and MemoryStore
// implement it; a Limiter over a Store that does not refuses request ids
// with ErrNoIdempotency. Errors are classified as Store.Lease's:
// ErrStoreRejected is about the call, anything else says the store may be
// unavailable.
type RequestStore interface {
	// Request applies req.Op to the key's bucket and to the record of
	// (req.Key, req.ID) in one atomic step, refilling the bucket as Lease
	// does (its debt credit and fresh-bucket grace included):
	//
	//   - RequestCheck: when the record holds a check, nothing changes and
	//     the reply is that check's decision (RequestReplayed). Otherwise
	//     req.Cost is taken if the bucket holds it, and the decision is
	//     recorded, allowed or not (never allowed with req.Deny).
	//   - RequestCharge: req.Cost is taken even below zero (down to
	//     −capacity) and recorded as the id's post-hoc charge; an id
	//     already charged is RequestReplayed when req.Cost equals that
	//     charge, RequestConflict otherwise, and changes nothing.
	//   - RequestRefund: req.Cost goes back to the bucket (up to capacity)
	//     and is recorded as the id's refund, when the id was charged at
	//     least req.Cost (its allowed check plus its post-hoc charge); an
	//     id without a record is RequestUnknown, a refund above the charge
	//     RequestOverRefund, an id already refunded RequestReplayed or
	//     RequestConflict as for a charge. Only RequestApplied writes.
	//
	// Every write sets the record to expire req.Horizon later, and the
	// bucket's expiry as Lease does.
	Request(ctx context.Context, req RequestCall) (RequestReply, error)
}

// RequestOp is what a RequestCall does.
type RequestOp uint8

// Request operations.
const (
	RequestCheck  RequestOp = iota + 1 // decide and spend, once per id
	RequestRefund                      // give cost back, once per id, bounded by the id's charge
	RequestCharge                      // take cost after the fact, into debt, once per id
)

func (o RequestOp) String() string {
	switch o {
	case RequestCheck:
		return "check"
	case RequestRefund:
		return "refund"
	case RequestCharge:
		return "charge"
	}
	return "unknown"
}

// RequestCall is one RequestStore.Request call.
type RequestCall struct {
	Op       RequestOp
	Key      string        // API key
	ID       string        // request id: 1 to MaxRequestIDLen printable ASCII bytes, no space
	Rate     float64       // the region's bucket, as in LeaseRequest
	Capacity float64       // the region's bucket, as in LeaseRequest
	Cost     int64         // cost units, ≥ 1
	Horizon  time.Duration // how long the record lives after its last write, ≥ 1 ms
	Grace    time.Duration // LeaseRequest.Grace, ≥ 0
	// Deny, for a check, refuses a new id for a reason of the caller's
	// own (the key's quota is spent): it is recorded as rejected and
	// takes nothing, so that its retries replay that; a known id replays
	// as always.
	Deny bool
}

// RequestStatus is what became of a RequestCall.
type RequestStatus uint8

// Request statuses.
const (
	RequestApplied    RequestStatus = iota // applied now
	RequestReplayed                        // applied before, with the same cost: nothing changed
	RequestUnknown                         // a refund of an id the store holds no record of
	RequestOverRefund                      // a refund above what the id was charged
	RequestConflict                        // the id was charged or refunded before with another cost
)

// RequestReply is the store's answer to Request.
type RequestReply struct {
	Status RequestStatus
	// Allowed is the id's check decision (false when it has none).
	Allowed bool
	// Charged is what the id is charged after the call: its check's cost
	// when allowed plus its post-hoc charge. Refunded is its refund.
	Charged, Refunded int64
	// Cost is the operation's applied cost: req.Cost when applied, the
	// first cost when replayed or in conflict.
	Cost int64
	// Tokens left in the bucket after the call (negative in debt).
	Tokens    float64
	StoreTime time.Time
}

// MaxRequestIDLen is the longest request id, in bytes.
const MaxRequestIDLen = 128

// DefaultIdempotencyHorizon is Config.IdempotencyHorizon's default.
const DefaultIdempotencyHorizon = 24 * time.Hour

// Errors of request ids.
var (
	// ErrInvalidRequestID: a request id is longer than MaxRequestIDLen
	// bytes, or holds a byte that is not printable ASCII (or a space).
	ErrInvalidRequestID = errors.New("invalid request id")
	// ErrNoIdempotency: the Limiter's store records no request ids (it is
	// not a RequestStore).
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
// MaxRequestIDLen bytes of printable ASCII without spaces. The error
// wraps ErrInvalidRequestID and names the field request_id.
func CheckRequestID(id string) error {
	if len(id) > MaxRequestIDLen {
		return fmt.Errorf("%w: request_id is %d bytes, at most %d allowed", ErrInvalidRequestID, len(id), MaxRequestIDLen)
	}
	return CheckName(ErrInvalidRequestID, "request_id", id)
}

func (r RequestCall) validate() error {
	bad := func(kind error, format string, args ...any) error {
		return fmt.Errorf("%w: %w: "+format, append([]any{ErrStoreRejected, kind}, args...)...)
	}
	switch {
	case r.Op < RequestCheck || r.Op > RequestCharge:
		return bad(ErrInvalidCost, "request op %d unknown", r.Op)
	case r.Key == "":
		return bad(ErrInvalidKey, "request key is empty")
	case CheckRequestID(r.ID) != nil:
		return bad(ErrInvalidRequestID, "request id %q", r.ID)
	case !(r.Rate > 0) || math.IsInf(r.Rate, 1):
		return bad(ErrInvalidPlan, "request rate must be a finite number > 0, got %v", r.Rate)
	case !(r.Capacity > 0) || math.IsInf(r.Capacity, 1):
		return bad(ErrInvalidPlan, "request capacity must be a finite number > 0, got %v", r.Capacity)
	case r.Cost < 1 || r.Cost > 1<<53:
		return bad(ErrInvalidCost, "request cost must be in [1, 2^53], got %d", r.Cost)
	case r.Horizon < time.Millisecond:
		return bad(ErrInvalidCost, "request horizon must be at least 1ms, got %v", r.Horizon)
	case r.Grace < 0:
		return bad(ErrInvalidCost, "request grace must not be negative, got %v", r.Grace)
	}
	return nil
}
