package memstore

import (
	"context"
	"math"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// Lease implements store.Store.
func (s *Store) Lease(ctx context.Context, req store.LeaseRequest) (store.LeaseReply, error) {
	if err := req.Validate(); err != nil {
		return store.LeaseReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.LeaseReply{}, err
	}
	now := s.clock.Now()
	sh := s.lockShard(req.Key, now)
	defer sh.mu.Unlock()
	// Work on a copy: a probe (want, return, debt and demand all 0) writes
	// nothing.
	b, fresh, wasted := sh.refilledLocked(req.Key, req.Rate, req.Capacity, req.Grace, now)
	if req.Want == 0 && req.Return == 0 && req.Debt == 0 && req.Demand == 0 {
		return store.LeaseReply{Tokens: b.tokens, StoreTime: now, DemandTotal: b.demand}, nil
	}
	b.demand += req.Demand
	if req.Return > 0 {
		b.tokens = math.Min(req.Capacity, b.tokens+float64(req.Return))
	}
	if !now.Before(b.creditEnd) {
		b.credit = 0
	}
	switch {
	case req.Debt > 0 && !fresh:
		avail := wasted + b.credit
		b.tokens = math.Max(-req.Capacity, b.tokens-math.Max(0, float64(req.Debt)-avail))
		if avail > float64(req.Debt) {
			if b.credit <= 0 {
				b.creditEnd = now.Add(req.Grace)
			}
			b.credit = avail - float64(req.Debt)
		} else {
			b.credit = 0
		}
	case b.credit > 0:
		b.credit += wasted
	}
	var granted int64
	if req.Want > 0 && b.tokens >= float64(req.Min) {
		granted = max(req.Min, int64(math.Floor(b.tokens/float64(req.Spread))))
		granted = min(req.Want, granted, int64(math.Floor(b.tokens)))
		b.tokens -= float64(granted)
	}
	b.expires = now.Add(store.BucketTTL(req.Rate, req.Capacity))
	sh.buckets[req.Key] = &b
	return store.LeaseReply{Granted: granted, Tokens: b.tokens, StoreTime: now, DemandTotal: b.demand}, nil
}

// refilledLocked returns a copy of key's bucket refilled to now, as
// redisstore's lua/bucket.lua refills it: a fresh bucket (none, or expired) starts full
// with grace's debt credit; wasted is the refill beyond capacity since the
// bucket was last touched.
func (sh *shard) refilledLocked(key string, rate, capacity float64, grace time.Duration, now time.Time) (b bucket, fresh bool, wasted float64) {
	old := sh.buckets[key]
	fresh = old == nil || !now.Before(old.expires)
	b = bucket{tokens: capacity, ts: now}
	if !fresh {
		b = *old
	} else if grace > 0 {
		b.credit, b.creditEnd = math.Inf(1), now.Add(grace)
	}
	b.tokens = math.Min(b.tokens, capacity)
	if dt := now.Sub(b.ts); dt > 0 {
		raw := b.tokens + dt.Seconds()*rate
		wasted = math.Max(0, raw-capacity)
		b.tokens = math.Min(capacity, raw)
		b.ts = now
	}
	return b, fresh, wasted
}
