package region_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// TestRequestIDChargedOnceAcrossLimiters sends the same request ids to two
// limiters on one Redis, concurrently: each id is charged once, both
// limiters answer the same decision, and the usage of both adds up to one
// charge per id.
func TestRequestIDChargedOnceAcrossLimiters(t *testing.T) {
	if testing.Short() {
		t.Skip("real Redis")
	}
	srv := testserver.StartRedis(t)
	rdb := redisClient(t, srv.Addr)
	prefix := fmt.Sprintf("idem%d:", time.Now().UnixNano())
	plan := region.Plan{Rate: 1, Capacity: 100}
	// A busy 2-core machine may answer slower than 5 ms: a check that
	// timed out is decided degraded and not recorded, which is not what
	// this test is about.
	slow := func(c *region.Config) { c.StoreTimeout = time.Second }
	a, ua := newRedisLimiter(t, rdb, prefix, plan, slow)
	b, ub := newRedisLimiter(t, rdb, prefix, plan, slow)
	ctx := context.Background()
	const ids = 60 // cost 2 each: 50 allowed, 10 rejected
	var wg sync.WaitGroup
	got := make([][2]region.Decision, ids)
	for i := range ids {
		for j, lim := range []*region.Limiter{a, b} {
			wg.Go(func() {
				d, err := lim.AllowRequest(ctx, "acct", 2, fmt.Sprintf("req-%d", i))
				if err != nil {
					t.Error(err)
				}
				got[i][j] = d
			})
		}
	}
	wg.Wait()
	allowed, replayed := 0, 0
	for i, g := range got {
		if g[0].Allowed != g[1].Allowed {
			t.Fatalf("id %d: limiters answered %v and %v", i, g[0].Allowed, g[1].Allowed)
		}
		if g[0].Replayed == g[1].Replayed {
			t.Fatalf("id %d: %+v and %+v, want exactly one replay", i, g[0], g[1])
		}
		if g[0].Degraded || g[1].Degraded {
			t.Fatalf("id %d: degraded", i)
		}
		if g[0].Allowed {
			allowed++
		}
		replayed++
	}
	if allowed < 50 || allowed > 51 { // one token may refill meanwhile
		t.Fatalf("%d ids allowed, want 50 (100 tokens at cost 2)", allowed)
	}
	a.Flush()
	b.Flush()
	ta, tb := ua.totals()["acct"], ub.totals()["acct"]
	if spent := ta.Spent + tb.Spent; spent != int64(2*allowed) {
		t.Fatalf("usage spent %d + %d, want %d: each id charged once", ta.Spent, tb.Spent, 2*allowed)
	}
	if leased := ta.Leased + tb.Leased; leased != int64(2*allowed) {
		t.Fatalf("usage leased %d, want %d", leased, 2*allowed)
	}
	if rej := ta.Rejected + tb.Rejected; rej != int64(2*(ids-allowed)) {
		t.Fatalf("usage rejected %d, want %d", rej, 2*(ids-allowed))
	}
}

// TestRequestIDSurvivesRestart retries a request id on a limiter started
// after the first one stopped (same Redis): the retry is charged nothing.
func TestRequestIDSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("real Redis")
	}
	srv := testserver.StartRedis(t)
	rdb := redisClient(t, srv.Addr)
	prefix := fmt.Sprintf("restart%d:", time.Now().UnixNano())
	plan := region.Plan{Rate: 0.001, Capacity: 10}
	ctx := context.Background()
	slow := func(c *region.Config) { c.StoreTimeout = time.Second }
	first, u1 := newRedisLimiter(t, rdb, prefix, plan, slow)
	d, err := first.AllowRequest(ctx, "acct", 4, "order-1")
	if err != nil || !d.Allowed || d.Replayed || d.Remaining != 6 {
		t.Fatalf("first: %+v %v", d, err)
	}
	first.Drain(ctx)
	second, u2 := newRedisLimiter(t, rdb, prefix, plan, slow)
	d, err = second.AllowRequest(ctx, "acct", 4, "order-1")
	if err != nil || !d.Allowed || !d.Replayed || d.Remaining != 6 {
		t.Fatalf("retry after restart: %+v %v, want the first decision replayed, 6 left", d, err)
	}
	second.Flush()
	if s1, s2 := u1.totals()["acct"].Spent, u2.totals()["acct"].Spent; s1 != 4 || s2 != 0 {
		t.Fatalf("spent %d then %d, want 4 then 0", s1, s2)
	}
	// And a refund, replayed on the first limiter's successor, once.
	for i := range 2 {
		a, err := second.Refund(ctx, "acct", 3, "order-1")
		if err != nil || a.Replayed != (i == 1) || a.Remaining != 9 || a.Refunded != 3 || a.Charged != 4 {
			t.Fatalf("refund %d: %+v %v", i, a, err)
		}
	}
	second.Flush()
	if r := u2.totals()["acct"].Refunded; r != 3 {
		t.Fatalf("refunded %d, want 3 (once)", r)
	}
}

// TestRefundAndChargeOnLimiter: a refund bounded by the charge, refunds
// and charges replayed applied once, a charge into debt rejects the
// following checks (this process's lease included) until refill repays
// it, and the usage counts each once.
func TestRefundAndChargeOnLimiter(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 10, Capacity: 100}, nil)
	ctx := context.Background()
	lim := f.lim
	d, err := lim.AllowRequest(ctx, "acct", 30, "r1")
	if err != nil || !d.Allowed || d.Remaining != 70 {
		t.Fatalf("check: %+v %v", d, err)
	}
	if _, err := lim.Refund(ctx, "acct", 31, "r1"); !errors.Is(err, region.ErrRefundExceedsCharge) {
		t.Fatalf("refund above the charge: %v", err)
	}
	if _, err := lim.Refund(ctx, "acct", 1, "never"); !errors.Is(err, region.ErrUnknownRequest) {
		t.Fatalf("refund of an unknown id: %v", err)
	}
	for i := range 3 {
		a, err := lim.Refund(ctx, "acct", 10, "r1")
		if err != nil || a.Replayed != (i > 0) || a.Remaining != 80 {
			t.Fatalf("refund %d: %+v %v", i, a, err)
		}
	}
	if _, err := lim.Refund(ctx, "acct", 5, "r1"); !errors.Is(err, region.ErrRequestConflict) {
		t.Fatalf("second refund with another cost: %v", err)
	}
	// A lease on this process, then a post-hoc charge into debt.
	if d := f.allow(t, "acct", 1); !d.Allowed {
		t.Fatalf("plain check: %+v", d)
	}
	for i := range 2 {
		a, err := lim.Charge(ctx, "acct", 150, "r2")
		if err != nil || a.Replayed != (i > 0) || a.Remaining >= 0 {
			t.Fatalf("charge %d: %+v %v", i, a, err)
		}
	}
	if d := f.allow(t, "acct", 1); d.Allowed {
		t.Fatalf("a check after the charge into debt was allowed: %+v", d)
	}
	if d, err := lim.AllowRequest(ctx, "acct", 1, "r3"); err != nil || d.Allowed {
		t.Fatalf("a check with an id after the debt: %+v %v", d, err)
	}
	f.clock.Advance(11 * time.Second) // 110 refilled: the debt (< 100) is repaid
	if d := f.allow(t, "acct", 1); !d.Allowed {
		t.Fatalf("after the refill: %+v", d)
	}
	lim.Flush()
	u := f.usage.totals()["acct"]
	if u.Refunded != 10 || u.Charged != 150 || u.Spent != 32 {
		t.Fatalf("usage %+v, want spent 32, refunded 10, charged 150", u)
	}
}

// TestRequestIDBadInput: every bad argument is an error naming its field,
// and nothing is charged.
func TestRequestIDBadInput(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 10, Capacity: 100}, nil)
	ctx := context.Background()
	long := strings.Repeat("r", store.MaxRequestIDLen+1)
	for _, tc := range []struct {
		name string
		err  error
		call func() error
	}{
		{"long id", region.ErrInvalidRequestID, func() error { _, err := f.lim.AllowRequest(ctx, "k", 1, long); return err }},
		{"id with a space", region.ErrInvalidRequestID, func() error { _, err := f.lim.AllowRequest(ctx, "k", 1, "a b"); return err }},
		{"empty key", region.ErrInvalidKey, func() error { _, err := f.lim.AllowRequest(ctx, "", 1, "id"); return err }},
		{"negative cost", region.ErrInvalidCost, func() error { _, err := f.lim.AllowRequest(ctx, "k", -1, "id"); return err }},
		{"cost above capacity", region.ErrCostExceedsCapacity, func() error { _, err := f.lim.AllowRequest(ctx, "k", 101, "id"); return err }},
		{"refund without id", region.ErrInvalidRequestID, func() error { _, err := f.lim.Refund(ctx, "k", 1, ""); return err }},
		{"refund of zero", region.ErrInvalidCost, func() error { _, err := f.lim.Refund(ctx, "k", 0, "id"); return err }},
		{"charge with empty key", region.ErrInvalidKey, func() error { _, err := f.lim.Charge(ctx, "", 1, "id"); return err }},
		{"charge of a long id", region.ErrInvalidRequestID, func() error { _, err := f.lim.Charge(ctx, "k", 1, long); return err }},
	} {
		if err := tc.call(); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	if n := f.store.Calls(); n != 0 {
		t.Fatalf("%d store calls for bad input", n)
	}
	if err := region.CheckRequestID(long); err == nil || !strings.Contains(err.Error(), "request_id") {
		t.Fatalf("CheckRequestID names no field: %v", err)
	}
}

// TestRequestIDWithoutRequestStore: a store that records no ids refuses
// checks with one, and checks without one go on.
func TestRequestIDWithoutRequestStore(t *testing.T) {
	lim, err := region.New(downStore{}, region.StaticPlans{Default: region.Plan{Rate: 1, Capacity: 1}}, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.AllowRequest(context.Background(), "k", 1, "id"); !errors.Is(err, region.ErrNoIdempotency) {
		t.Fatalf("%v, want ErrNoIdempotency", err)
	}
}

// TestRequestIDWhileStoreDown: with the breaker open a check with an id is
// decided by the failure policy, flagged, and not recorded; a refund
// fails with store.ErrStoreUnavailable.
func TestRequestIDWhileStoreDown(t *testing.T) {
	clk := newManualClock()
	st := &flakyRequestStore{Store: memstore.New(clk)}
	cfg := region.DefaultConfig()
	cfg.Clock = clk
	lim, err := region.New(st, region.StaticPlans{Default: region.Plan{Rate: 10, Capacity: 100}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st.setDown(true)
	for range cfg.BreakerThreshold {
		lim.AllowRequest(ctx, "k", 1, "x")
	}
	d, err := lim.AllowRequest(ctx, "k", 1, "id")
	if err != nil || !d.Degraded || d.Replayed {
		t.Fatalf("while down: %+v %v, want a degraded decision", d, err)
	}
	if _, err := lim.Refund(ctx, "k", 1, "id"); !errors.Is(err, store.ErrStoreUnavailable) {
		t.Fatalf("refund while down: %v", err)
	}
}

// flakyRequestStore is a memstore.Store whose request calls fail while down.
type flakyRequestStore struct {
	*memstore.Store
	mu   sync.Mutex
	down bool
}

func (s *flakyRequestStore) setDown(v bool) { s.mu.Lock(); s.down = v; s.mu.Unlock() }

func (s *flakyRequestStore) Request(ctx context.Context, req store.RequestCall) (store.RequestReply, error) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		return store.RequestReply{}, fmt.Errorf("%w: test", store.ErrStoreUnavailable)
	}
	return s.Store.Request(ctx, req)
}
