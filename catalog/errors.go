package catalog

import "errors"

// Errors returned by the Catalog, wrapped with context naming the field.
// An unknown plan is limit.ErrUnknownPlan.
var (
	// ErrInvalidName: a plan, key or endpoint name is empty, longer than
	// store.MaxKeyLen bytes, or holds a byte that is not printable ASCII.
	ErrInvalidName = errors.New("invalid name")
	// ErrInvalidValue: a plan's rate or capacity, or an endpoint's cost, is
	// out of range. A plan's range is limit.Plan's: rate in
	// [limit.MinRate, limit.MaxRate], capacity in [1, limit.MaxCapacity];
	// the error wraps limit.ErrInvalidPlan and names the field.
	ErrInvalidValue = errors.New("invalid value")
	// ErrUnavailable: the key-value bucket cannot be reached (NATS is down or
	// the catalogue has not started); reads still answer from the last known
	// good copy, writes fail.
	ErrUnavailable = errors.New("catalogue unavailable")
	// ErrNotFound: no entry of that name.
	ErrNotFound = errors.New("not found")
	// ErrInUse: a plan cannot be deleted while keys are assigned to it.
	ErrInUse = errors.New("in use")
	// ErrReadOnly: this Catalog was configured ReadOnly (the process is
	// not the control plane).
	ErrReadOnly = errors.New("catalogue is read-only here")
)
