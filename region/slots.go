package region

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SlotStore holds concurrency slots (Plan.Concurrency): per key, a set of
// lease ids each with an expiry on the store's clock. RedisStore and
// MemoryStore implement it; a Limiter over a Store that does not refuses
// Acquire with ErrNoConcurrency. Errors are classified as Store.Lease's:
// ErrStoreRejected is about the call, anything else says the store may be
// unavailable.
type SlotStore interface {
	// AcquireSlot first forgets the key's expired slots, then renews
	// req.ID when it holds a slot, or takes one for it when fewer than
	// req.Limit are held; either way the slot then lives req.TTL.
	AcquireSlot(ctx context.Context, req SlotRequest) (SlotReply, error)
	// ReleaseSlot frees id's slot of key and reports whether it held one.
	ReleaseSlot(ctx context.Context, key, id string) (bool, error)
}

// SlotRequest is one AcquireSlot call.
type SlotRequest struct {
	Key   string        // API key
	ID    string        // lease id: 1 to MaxSlotIDLen printable ASCII bytes
	Limit int           // most slots held at once, ≥ 1
	TTL   time.Duration // how long the slot lives unless renewed, ≥ 1 ms
}

// SlotReply is the store's answer to AcquireSlot.
type SlotReply struct {
	Acquired bool          // the slot is held (taken or renewed)
	Held     int           // slots held after the call
	TTL      time.Duration // how long the slot lives, when Acquired
}

// MaxSlotIDLen is the longest lease id, in bytes.
const MaxSlotIDLen = 64

// ErrNoConcurrency: Acquire was called for a key whose plan has no
// concurrency limit (Plan.Concurrency 0), or on a store that holds no
// slots.
var ErrNoConcurrency = errors.New("no concurrency limit")

// ErrInvalidLeaseID: a lease id is empty, longer than MaxSlotIDLen bytes or
// not printable ASCII.
var ErrInvalidLeaseID = errors.New("invalid lease id")

func (r SlotRequest) validate() error {
	bad := func(kind error, format string, args ...any) error {
		return fmt.Errorf("%w: %w: "+format, append([]any{ErrStoreRejected, kind}, args...)...)
	}
	switch {
	case r.Key == "":
		return bad(ErrInvalidKey, "slot request key is empty")
	case checkLeaseID(r.ID) != nil:
		return bad(ErrInvalidLeaseID, "slot request id %q", r.ID)
	case r.Limit < 1:
		return bad(ErrInvalidPlan, "slot request limit must be at least 1, got %d", r.Limit)
	case r.TTL < time.Millisecond:
		return bad(ErrInvalidPlan, "slot request ttl must be at least 1ms, got %v", r.TTL)
	}
	return nil
}

// checkLeaseID reports whether id can be a lease id. The error wraps
// ErrInvalidLeaseID and names the field lease_id.
func checkLeaseID(id string) error {
	if len(id) > MaxSlotIDLen {
		return fmt.Errorf("%w: lease_id is %d bytes, at most %d allowed", ErrInvalidLeaseID, len(id), MaxSlotIDLen)
	}
	return CheckName(ErrInvalidLeaseID, "lease_id", id)
}
