package store

import (
	"context"
	"math"
	"time"
)

// Store is a region's shared token buckets, one per key. Implementations:
// redisstore.Store (production) and memstore.Store (one process). Both
// pass the same conformance suite (storetest.Run).
type Store interface {
	// Lease refills the key's bucket on the store's own clock, credits back
	// req.Return unused permits (capped at capacity), and then grants up to
	// req.Want permits if at least req.Min tokens are available. Near
	// exhaustion the grant is cut to tokens/req.Spread (but never below
	// req.Min), so that the processes sharing the bucket split what is left.
	// req.Debt, cost allowed in degraded mode, is charged before the grant:
	// first against the refill the capacity cap threw away since the bucket
	// was last touched (what the bucket could have paid for had it been
	// reachable), the rest even below zero (down to −capacity), so that
	// over-admission is paid back by the bucket's refill. Refill left over
	// from paying a debt pays the debts that arrive within req.Grace after
	// it (the region's other processes recover a moment later, with debts
	// from the same outage). A fresh bucket (expired, or a store that lost
	// its state) charges no debt within req.Grace of its creation. req.Demand
	// is added to the bucket's running demand count. A request with Want,
	// Return, Debt and Demand all 0 is a probe: it reports the bucket and
	// writes nothing. Every write sets the bucket's expiry to twice its time
	// to fill, at least a second and at most MaxBucketTTL.
	//
	// An error wrapping ErrStoreRejected is about this call alone (its
	// arguments, or the key's data in the store) and says the store is
	// available; any other error says it may not be (docs/design.md
	// [degraded-mode]). A rejected call writes nothing.
	Lease(ctx context.Context, req LeaseRequest) (LeaseReply, error)
}

// MaxBucketTTL is the longest expiry a store sets on a bucket: 366 days.
// A bucket's expiry is twice its time to fill (so that it is full by the
// time it is forgotten), clamped to [1 s, MaxBucketTTL]: a bucket that
// takes longer than half of MaxBucketTTL to fill and sees no write for
// MaxBucketTTL comes back full. The clamp also keeps the expiry a number
// Redis accepts for every rate (redisstore's lua/bucket.lua).
const MaxBucketTTL = 366 * 24 * time.Hour

// BucketTTL is a bucket's expiry: twice its time to fill, clamped to
// [1 s, MaxBucketTTL]. redisstore's lua/bucket.lua computes the same.
func BucketTTL(rate, capacity float64) time.Duration {
	ms := math.Ceil(2000 * capacity / rate)
	switch {
	case !(ms <= float64(MaxBucketTTL/time.Millisecond)): // NaN and +Inf too
		return MaxBucketTTL
	case ms < 1000:
		return time.Second
	}
	return time.Duration(ms) * time.Millisecond
}

// LeaseRequest is one slow-path store call. Rate and Capacity are the
// region's bucket, already scaled by the region's share of the key's limit,
// so a share change needs no migration.
type LeaseRequest struct {
	Key      string  // API key; the store derives its own bucket name
	Rate     float64 // refill, cost units per second, finite and > 0
	Capacity float64 // bucket size, cost units, finite and > 0
	Want     int64   // permits asked for, ≥ 0 (0 = only return)
	Min      int64   // grant nothing unless at least this many are available
	Return   int64   // unused permits given back, ≥ 0
	Spread   int64   // near exhaustion, grant at most tokens/Spread, ≥ 1
	Debt     int64   // cost allowed in degraded mode, charged now, ≥ 0
	// Demand is the cost this process was asked for (allowed or rejected,
	// degraded included) since its previous call that reported demand, ≥ 0.
	// It only counts: it is how the Limiter learns its local share.
	Demand int64
	// Grace is how long debt credit lasts (see Store.Lease), ≥ 0.
	Grace time.Duration
}

// LeaseReply is the store's answer.
type LeaseReply struct {
	// Granted permits, 0 ≤ Granted ≤ Want.
	Granted int64
	// Tokens left in the bucket after the grant.
	Tokens float64
	// StoreTime is the store's clock when it served the call.
	StoreTime time.Time
	// DemandTotal is the sum of every request's Demand since the bucket was
	// created, after this one's. The difference between two replies is the
	// whole region's demand in between, from which the Limiter learns this
	// process's share of the key's traffic (docs/design.md
	// [degraded-share]). It restarts when the bucket expires.
	DemandTotal int64
}

// Validate reports whether r is in range; a store calls it before anything
// else. Its errors wrap ErrStoreRejected.
func (r LeaseRequest) Validate() error {
	switch {
	case r.Key == "":
		return rejected("lease request key is empty")
	case !(r.Rate > 0) || math.IsInf(r.Rate, 1):
		return rejected("lease request rate must be a finite number > 0, got %v", r.Rate)
	case !(r.Capacity > 0) || math.IsInf(r.Capacity, 1):
		return rejected("lease request capacity must be a finite number > 0, got %v", r.Capacity)
	case r.Want < 0 || r.Min < 0 || r.Return < 0 || r.Debt < 0 || r.Demand < 0:
		return rejected("lease request want %d, min %d, return %d, debt %d and demand %d must not be negative",
			r.Want, r.Min, r.Return, r.Debt, r.Demand)
	case r.Grace < 0:
		return rejected("lease request grace must not be negative, got %v", r.Grace)
	case r.Spread < 1:
		return rejected("lease request spread must be at least 1, got %d", r.Spread)
	}
	return nil
}
