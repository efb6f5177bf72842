package store

import (
	"context"
	"time"
)

// SlotStore holds concurrency slots (Plan.Concurrency): per key, a set of
// lease ids each with an expiry on the store's clock. redisstore.Store and
// memstore.Store implement it; a region.Limiter over a Store that does not
// refuses Acquire with region.ErrNoConcurrency. Errors are classified as Store.Lease's:
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

// Validate reports whether r is in range; a store calls it before anything
// else. Its errors wrap ErrStoreRejected.
func (r SlotRequest) Validate() error {
	switch {
	case r.Key == "":
		return rejected("slot request key is empty")
	case !validName(r.ID, MaxSlotIDLen):
		return rejected("slot request id %q", r.ID)
	case r.Limit < 1:
		return rejected("slot request limit must be at least 1, got %d", r.Limit)
	case r.TTL < time.Millisecond:
		return rejected("slot request ttl must be at least 1ms, got %v", r.TTL)
	}
	return nil
}
