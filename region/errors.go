package region

import (
	"errors"
	"fmt"

	"github.com/quotaplatform/quota/limit"
)

// Errors returned by the Limiter. A rejection is not an error: an error means
// the Limiter could not decide. Each is wrapped with context naming the field.
var (
	// ErrInvalidKey: the key is empty, longer than store.MaxKeyLen bytes, or holds a
	// byte that is not printable ASCII (limit.ErrInvalidKey).
	ErrInvalidKey = limit.ErrInvalidKey
	// ErrInvalidCost: the cost is zero or negative.
	ErrInvalidCost = errors.New("invalid cost")
	// ErrCostExceedsCapacity: the cost is larger than the plan's capacity, so
	// no amount of waiting could admit it.
	ErrCostExceedsCapacity = errors.New("cost exceeds capacity")
	// ErrUnknownPlan: the key resolves to no plan (limit.ErrUnknownPlan).
	ErrUnknownPlan = limit.ErrUnknownPlan
	// ErrInvalidPlan: a plan's field is out of its range (Plan.Validate;
	// limit.ErrInvalidPlan). The error is a *limit.FieldError naming it.
	ErrInvalidPlan = limit.ErrInvalidPlan
	// ErrUnknownEndpoint: AllowEndpoint was given an endpoint with no weight
	// while Config.Costs is set and has no default.
	ErrUnknownEndpoint = errors.New("unknown endpoint")
)

// costError is the error of a check whose cost is above its plan's
// capacity (limit).
func costError(cost, limit int64) error {
	return fmt.Errorf("%w: cost %d is above the plan's capacity %d", ErrCostExceedsCapacity, cost, limit)
}
