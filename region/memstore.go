package region

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/quotaplatform/quota/clock"
)

// MemoryStore is the Store contract in process: the embedded default for a
// single process, and a reference for the Redis script. Buckets expire like
// Redis keys (twice the time to fill, at most MaxBucketTTL), swept as calls
// pass. Its only errors are refused requests (ErrStoreRejected) and the
// context's.
type MemoryStore struct {
	clock  clock.Clock
	seed   maphash.Seed
	shards [shardCount]memShard
}

type memShard struct {
	mu      sync.Mutex
	buckets map[string]*memBucket // guarded by mu
	calls   int                   // guarded by mu; paces sweeps
	// slots holds concurrency slots: key → lease id → expiry; nil until
	// the first; guarded by mu. A key's expired slots go at its next call.
	slots map[string]map[string]time.Time
	// requests holds request records (RequestStore) by key + " " + id;
	// nil until the first; guarded by mu; swept with the buckets.
	requests map[string]*memRequest
	// quotas holds quota counters (QuotaStore) by key, unit and period
	// start; nil until the first; guarded by mu; swept with the buckets.
	quotas map[string]*memQuota
}

// memRequest is one request id's record (lua/request.lua's hash).
type memRequest struct {
	checked, allowed bool
	checkCost        int64
	charge, refund   int64 // 0: none (costs are ≥ 1)
	expires          time.Time
}

type memBucket struct {
	tokens  float64
	ts      time.Time
	demand  int64
	expires time.Time
	// credit is refill left over from paying a debt, for the region's other
	// processes' debts until creditEnd (see lease.lua).
	credit    float64
	creditEnd time.Time
}

// memSweepEvery is how many calls pass between sweeps of one shard.
const memSweepEvery = 4096

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store on clk (nil: the system clock). Its
// clock is the store's clock, as Redis' is for RedisStore: a Limiter's
// Config.ClockOffset does not move it.
func NewMemoryStore(clk clock.Clock) *MemoryStore {
	if clk == nil {
		clk = clock.System()
	}
	s := &MemoryStore{clock: clk, seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].buckets = make(map[string]*memBucket)
	}
	return s
}

// Lease implements Store.
func (s *MemoryStore) Lease(ctx context.Context, req LeaseRequest) (LeaseReply, error) {
	if err := req.validate(); err != nil {
		return LeaseReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return LeaseReply{}, err
	}
	now := s.clock.Now()
	sh := s.lockShard(req.Key, now)
	defer sh.mu.Unlock()
	// Work on a copy: a probe (want, return, debt and demand all 0) writes
	// nothing.
	b, fresh, wasted := sh.refilledLocked(req.Key, req.Rate, req.Capacity, req.Grace, now)
	if req.Want == 0 && req.Return == 0 && req.Debt == 0 && req.Demand == 0 {
		return LeaseReply{Tokens: b.tokens, StoreTime: now, DemandTotal: b.demand}, nil
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
	b.expires = now.Add(bucketTTL(req.Rate, req.Capacity))
	sh.buckets[req.Key] = &b
	return LeaseReply{Granted: granted, Tokens: b.tokens, StoreTime: now, DemandTotal: b.demand}, nil
}

// lockShard locks and returns key's shard, sweeping it every
// memSweepEvery calls.
func (s *MemoryStore) lockShard(key string, now time.Time) *memShard {
	sh := &s.shards[maphash.String(s.seed, key)%shardCount]
	sh.mu.Lock()
	if sh.calls++; sh.calls%memSweepEvery == 0 {
		sh.sweepLocked(now)
	}
	return sh
}

// refilledLocked returns a copy of key's bucket refilled to now, as
// lua/lease.lua refills it: a fresh bucket (none, or expired) starts full
// with grace's debt credit; wasted is the refill beyond capacity since the
// bucket was last touched.
func (sh *memShard) refilledLocked(key string, rate, capacity float64, grace time.Duration, now time.Time) (b memBucket, fresh bool, wasted float64) {
	old := sh.buckets[key]
	fresh = old == nil || !now.Before(old.expires)
	b = memBucket{tokens: capacity, ts: now}
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

// sweepLocked forgets expired buckets, request records and quota counters.
func (sh *memShard) sweepLocked(now time.Time) {
	for k, b := range sh.buckets {
		if !now.Before(b.expires) {
			delete(sh.buckets, k)
		}
	}
	for k, r := range sh.requests {
		if !now.Before(r.expires) {
			delete(sh.requests, k)
		}
	}
	for k, q := range sh.quotas {
		if !now.Before(q.expires) {
			delete(sh.quotas, k)
		}
	}
}

var _ RequestStore = (*MemoryStore)(nil)

// Request implements RequestStore as lua/request.lua does.
func (s *MemoryStore) Request(ctx context.Context, req RequestCall) (RequestReply, error) {
	if err := req.validate(); err != nil {
		return RequestReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return RequestReply{}, err
	}
	now := s.clock.Now()
	sh := s.lockShard(req.Key, now)
	defer sh.mu.Unlock()
	rk := req.Key + " " + req.ID
	var rec memRequest
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
	answer := func(st RequestStatus, applied int64) RequestReply {
		return RequestReply{Status: st, Allowed: rec.allowed, Charged: charged(), Refunded: rec.refund,
			Cost: applied, Tokens: b.tokens, StoreTime: now}
	}
	switch req.Op {
	case RequestCheck:
		if rec.checked {
			return answer(RequestReplayed, rec.checkCost), nil
		}
		rec.checked, rec.checkCost = true, req.Cost
		if !req.Deny && b.tokens >= float64(req.Cost) {
			b.tokens -= float64(req.Cost)
			rec.allowed = true
		}
	case RequestCharge:
		if rec.charge != 0 {
			if rec.charge == req.Cost {
				return answer(RequestReplayed, rec.charge), nil
			}
			return answer(RequestConflict, rec.charge), nil
		}
		b.tokens = math.Max(-req.Capacity, b.tokens-float64(req.Cost))
		rec.charge = req.Cost
	case RequestRefund:
		switch {
		case !known:
			return answer(RequestUnknown, 0), nil
		case rec.refund != 0 && rec.refund == req.Cost:
			return answer(RequestReplayed, rec.refund), nil
		case rec.refund != 0:
			return answer(RequestConflict, rec.refund), nil
		case req.Cost > charged():
			return answer(RequestOverRefund, 0), nil
		}
		b.tokens = math.Min(req.Capacity, b.tokens+float64(req.Cost))
		rec.refund = req.Cost
	}
	rec.expires = now.Add(req.Horizon)
	if sh.requests == nil {
		sh.requests = make(map[string]*memRequest)
	}
	sh.requests[rk] = &rec
	b.expires = now.Add(bucketTTL(req.Rate, req.Capacity))
	sh.buckets[req.Key] = &b
	return answer(RequestApplied, req.Cost), nil
}

// Len returns the number of live buckets, for tests.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.buckets)
		sh.mu.Unlock()
	}
	return n
}

var _ SlotStore = (*MemoryStore)(nil)

// AcquireSlot implements SlotStore.
func (s *MemoryStore) AcquireSlot(ctx context.Context, req SlotRequest) (SlotReply, error) {
	if err := req.validate(); err != nil {
		return SlotReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return SlotReply{}, err
	}
	now := s.clock.Now()
	sh := s.slotShard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := sh.liveLocked(req.Key, now)
	if _, ok := held[req.ID]; !ok && len(held) >= req.Limit {
		return SlotReply{Held: len(held)}, nil
	}
	if held == nil {
		if sh.slots == nil {
			sh.slots = make(map[string]map[string]time.Time)
		}
		held = make(map[string]time.Time)
		sh.slots[req.Key] = held
	}
	held[req.ID] = now.Add(req.TTL)
	return SlotReply{Acquired: true, Held: len(held), TTL: req.TTL}, nil
}

// ReleaseSlot implements SlotStore.
func (s *MemoryStore) ReleaseSlot(ctx context.Context, key, id string) (bool, error) {
	if err := (SlotRequest{Key: key, ID: id, Limit: 1, TTL: time.Millisecond}).validate(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	sh := s.slotShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := sh.liveLocked(key, s.clock.Now())
	if _, ok := held[id]; !ok {
		return false, nil
	}
	delete(held, id)
	if len(held) == 0 {
		delete(sh.slots, key)
	}
	return true, nil
}

func (s *MemoryStore) slotShard(key string) *memShard {
	return &s.shards[maphash.String(s.seed, key)%shardCount]
}

// liveLocked returns key's slots with the expired ones dropped (nil when
// none is held).
func (sh *memShard) liveLocked(key string, now time.Time) map[string]time.Time {
	held := sh.slots[key]
	for id, exp := range held {
		if !now.Before(exp) {
			delete(held, id)
		}
	}
	if held != nil && len(held) == 0 {
		delete(sh.slots, key)
		return nil
	}
	return held
}
