package region_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// countingStore counts calls to the store it wraps.
type countingStore struct {
	store.Store
	mu    sync.Mutex
	calls int
	asked []int64
}

func (c *countingStore) Lease(ctx context.Context, req store.LeaseRequest) (store.LeaseReply, error) {
	c.mu.Lock()
	c.calls++
	c.asked = append(c.asked, req.Want)
	c.mu.Unlock()
	return c.Store.Lease(ctx, req)
}

// Request counts and forwards a request call (store.RequestStore).
func (c *countingStore) Request(ctx context.Context, req store.RequestCall) (store.RequestReply, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	rs, ok := c.Store.(store.RequestStore)
	if !ok {
		return store.RequestReply{}, fmt.Errorf("%T records no request ids", c.Store)
	}
	return rs.Request(ctx, req)
}

// LeaseQuota counts and forwards a quota call (store.QuotaStore).
func (c *countingStore) LeaseQuota(ctx context.Context, call store.QuotaCall) (store.QuotaReply, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	qs, ok := c.Store.(store.QuotaStore)
	if !ok {
		return store.QuotaReply{}, fmt.Errorf("%T keeps no quota counters", c.Store)
	}
	return qs.LeaseQuota(ctx, call)
}

func (c *countingStore) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// usageLog is a UsageSink that keeps every delta.
type usageLog struct {
	mu sync.Mutex
	us []region.Usage
}

func (u *usageLog) Record(batch []region.Usage) {
	u.mu.Lock()
	u.us = append(u.us, batch...)
	u.mu.Unlock()
}

// totals sums the deltas per key.
func (u *usageLog) totals() map[string]region.Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := map[string]region.Usage{}
	for _, x := range u.us {
		t := m[x.Key]
		t.Key = x.Key
		t.Spent += x.Spent
		t.Leased += x.Leased
		t.Rejected += x.Rejected
		t.Degraded += x.Degraded
		t.WouldReject += x.WouldReject
		t.Refunded += x.Refunded
		t.Charged += x.Charged
		m[x.Key] = t
	}
	return m
}

type fixture struct {
	clock *clock.Manual
	store *countingStore
	lim   *region.Limiter
	usage *usageLog
}

func newFixture(t *testing.T, plan region.Plan, mod func(*region.Config)) *fixture {
	t.Helper()
	clock := newManualClock()
	st := &countingStore{Store: memstore.New(clock)}
	usage := &usageLog{}
	cfg := region.DefaultConfig()
	cfg.Clock = clock
	cfg.Usage = usage
	if mod != nil {
		mod(&cfg)
	}
	lim, err := region.New(st, region.StaticPlans{Default: plan}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{clock: clock, store: st, lim: lim, usage: usage}
}

func (f *fixture) allow(t *testing.T, key string, cost int64) region.Decision {
	t.Helper()
	d, err := f.lim.Allow(context.Background(), key, cost)
	if err != nil {
		t.Fatalf("Allow(%q, %d): %v", key, cost, err)
	}
	return d
}

type fixedShare float64

func (s fixedShare) Share(string) float64 { return float64(s) }

func keyName(i int) string {
	const digits = "0123456789"
	b := []byte("key-")
	if i == 0 {
		return "key-0"
	}
	var rev []byte
	for ; i > 0; i /= 10 {
		rev = append(rev, digits[i%10])
	}
	for j := len(rev) - 1; j >= 0; j-- {
		b = append(b, rev[j])
	}
	return string(b)
}

type settableShare struct {
	mu sync.Mutex
	v  float64
}

func (s *settableShare) Share(string) float64 { s.mu.Lock(); defer s.mu.Unlock(); return s.v }

func (s *settableShare) set(v float64) { s.mu.Lock(); s.v = v; s.mu.Unlock() }

type settablePlans struct {
	mu sync.Mutex
	p  region.Plan
}

func (s *settablePlans) Plan(string) (region.Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p, nil
}

func (s *settablePlans) set(p region.Plan) { s.mu.Lock(); s.p = p; s.mu.Unlock() }

// downStore is a store that is never reachable.
type downStore struct{}

func (downStore) Lease(context.Context, store.LeaseRequest) (store.LeaseReply, error) {
	return store.LeaseReply{}, store.ErrStoreUnavailable
}
