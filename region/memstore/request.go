package memstore

import (
	"context"
	"math"

	"github.com/quotaplatform/quota/region/store"
)

var _ store.RequestStore = (*Store)(nil)

// Request implements store.RequestStore as redisstore's lua/request.lua does.
func (s *Store) Request(ctx context.Context, req store.RequestCall) (store.RequestReply, error) {
	if err := req.Validate(); err != nil {
		return store.RequestReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.RequestReply{}, err
	}
	now := s.clock.Now()
	sh := s.lockShard(req.Key, now)
	defer sh.mu.Unlock()
	rk := req.Key + " " + req.ID
	var rec record
	old := sh.requests[rk]
	known := old != nil && now.Before(old.expires)
	if known {
		rec = *old
	}
	// The bucket, refilled as Lease refills it.
	b, _, wasted := sh.refilledLocked(req.Key, req.Rate, req.Capacity, req.Grace, now)
	if !now.Before(b.creditEnd) {
		b.credit = 0
	}
	if b.credit > 0 {
		b.credit += wasted
	}
	charged := func() int64 {
		c := rec.charge
		if rec.allowed {
			c += rec.checkCost
		}
		return c
	}
	answer := func(st store.RequestStatus, applied int64) store.RequestReply {
		return store.RequestReply{Status: st, Allowed: rec.allowed, Charged: charged(), Refunded: rec.refund,
			Cost: applied, Tokens: b.tokens, StoreTime: now}
	}
	switch req.Op {
	case store.RequestCheck:
		if rec.checked {
			return answer(store.RequestReplayed, rec.checkCost), nil
		}
		rec.checked, rec.checkCost = true, req.Cost
		if !req.Deny && b.tokens >= float64(req.Cost) {
			b.tokens -= float64(req.Cost)
			rec.allowed = true
		}
	case store.RequestCharge:
		if rec.charge != 0 {
			if rec.charge == req.Cost {
				return answer(store.RequestReplayed, rec.charge), nil
			}
			return answer(store.RequestConflict, rec.charge), nil
		}
		b.tokens = math.Max(-req.Capacity, b.tokens-float64(req.Cost))
		rec.charge = req.Cost
	case store.RequestRefund:
		switch {
		case !known:
			return answer(store.RequestUnknown, 0), nil
		case rec.refund != 0 && rec.refund == req.Cost:
			return answer(store.RequestReplayed, rec.refund), nil
		case rec.refund != 0:
			return answer(store.RequestConflict, rec.refund), nil
		case req.Cost > charged():
			return answer(store.RequestOverRefund, 0), nil
		}
		b.tokens = math.Min(req.Capacity, b.tokens+float64(req.Cost))
		rec.refund = req.Cost
	}
	rec.expires = now.Add(req.Horizon)
	if sh.requests == nil {
		sh.requests = make(map[string]*record)
	}
	sh.requests[rk] = &rec
	b.expires = now.Add(store.BucketTTL(req.Rate, req.Capacity))
	sh.buckets[req.Key] = &b
	return answer(store.RequestApplied, req.Cost), nil
}
