package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// testLease: Store.Lease's steps (grants, min, returns, spread, debt and
// its credit, a fresh bucket's grace, demand, refill), refusals, a probe
// that writes nothing, and a capacity shrink.
func testLease(t *testing.T, open Opener) {
	type step struct {
		wait    time.Duration
		req     store.LeaseRequest // Key, Rate, Capacity filled in if zero
		granted int64
		tokens  float64 // expected tokens left, ±0.5 for real clocks
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"new bucket starts full and grants what is asked", []step{
			{req: store.LeaseRequest{Want: 4, Min: 1}, granted: 4, tokens: 6},
		}},
		{"grant capped by what is left", []step{
			{req: store.LeaseRequest{Want: 8, Min: 1}, granted: 8, tokens: 2},
			{req: store.LeaseRequest{Want: 8, Min: 1}, granted: 2, tokens: 0},
		}},
		{"nothing below min", []step{
			{req: store.LeaseRequest{Want: 9, Min: 9}, granted: 9, tokens: 1},
			{req: store.LeaseRequest{Want: 5, Min: 2}, granted: 0, tokens: 1},
		}},
		{"returned permits come back, capped at capacity", []step{
			{req: store.LeaseRequest{Want: 6, Min: 1}, granted: 6, tokens: 4},
			{req: store.LeaseRequest{Return: 3, Demand: 4}, granted: 0, tokens: 7},
			{req: store.LeaseRequest{Return: 9}, granted: 0, tokens: 10},
		}},
		{"spread splits what is left near exhaustion", []step{
			{req: store.LeaseRequest{Want: 2, Min: 1, Spread: 4}, granted: 2, tokens: 8},
			{req: store.LeaseRequest{Want: 8, Min: 1, Spread: 4}, granted: 2, tokens: 6},
			{req: store.LeaseRequest{Want: 8, Min: 5, Spread: 4}, granted: 5, tokens: 1},
		}},
		{"debt is charged below zero, down to minus capacity", []step{
			{req: store.LeaseRequest{Debt: 4}, granted: 0, tokens: 10}, // a fresh bucket charges nothing
			{req: store.LeaseRequest{Debt: 4}, granted: 0, tokens: 6},
			{req: store.LeaseRequest{Want: 2, Min: 1, Debt: 5}, granted: 1, tokens: 0},
			{req: store.LeaseRequest{Debt: 30}, granted: 0, tokens: -10},
			{req: store.LeaseRequest{Want: 1, Min: 1}, granted: 0, tokens: -10},
		}},
		{"refill the cap threw away pays for debt first", []step{
			{req: store.LeaseRequest{Want: 1, Min: 1}, granted: 1, tokens: 9},
			{wait: 400 * time.Millisecond, req: store.LeaseRequest{Debt: 5}, granted: 0, tokens: 8}, // 4 refilled, 3 over the cap
		}},
		{"refill left over from one debt pays the next", []step{
			{req: store.LeaseRequest{Want: 1, Min: 1}, granted: 1, tokens: 9},
			{wait: 400 * time.Millisecond, req: store.LeaseRequest{Debt: 1, Grace: time.Minute}, granted: 0, tokens: 10}, // 3 over the cap: 2 left
			{req: store.LeaseRequest{Debt: 5, Grace: time.Minute}, granted: 0, tokens: 7},                                // 2 paid by credit
			{req: store.LeaseRequest{Debt: 1, Grace: time.Minute}, granted: 0, tokens: 6},                                // none left
		}},
		{"debt credit ends after its grace", []step{
			{req: store.LeaseRequest{Want: 1, Min: 1}, granted: 1, tokens: 9},
			{wait: 400 * time.Millisecond, req: store.LeaseRequest{Debt: 1, Grace: 300 * time.Millisecond}, granted: 0, tokens: 10}, // 2 left over
			{wait: 400 * time.Millisecond, req: store.LeaseRequest{Want: 10, Min: 10}, granted: 10, tokens: 0},
			{req: store.LeaseRequest{Debt: 2}, granted: 0, tokens: -2},
		}},
		{"a fresh bucket charges no debt within its grace", []step{
			{req: store.LeaseRequest{Want: 1, Min: 1, Grace: 300 * time.Millisecond}, granted: 1, tokens: 9},
			{req: store.LeaseRequest{Debt: 4}, granted: 0, tokens: 9},
			{req: store.LeaseRequest{Want: 9, Min: 9}, granted: 9, tokens: 0},
			{wait: 400 * time.Millisecond, req: store.LeaseRequest{Debt: 6}, granted: 0, tokens: -2}, // 4 refilled, nothing wasted
		}},
		{"demand is counted and spends nothing", []step{
			{req: store.LeaseRequest{Demand: 7}, granted: 0, tokens: 10},
			{req: store.LeaseRequest{Want: 2, Min: 1, Demand: 2}, granted: 2, tokens: 8},
			{req: store.LeaseRequest{Demand: 30}, granted: 0, tokens: 8},
		}},
		{"refill at rate on the store's clock", []step{
			{req: store.LeaseRequest{Want: 10, Min: 1}, granted: 10, tokens: 0},
			{wait: 300 * time.Millisecond, req: store.LeaseRequest{Want: 10, Min: 1}, granted: 3, tokens: 0},
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, advance := open(t)
			key := fmt.Sprintf("contract-%d", i)
			var lastDemand int64
			var clock refill
			expect := storeNow(t, s)
			for j, sp := range tc.steps {
				if sp.wait > 0 {
					advance(sp.wait)
					expect = expect.Add(sp.wait)
				}
				req := sp.req
				req.Key, req.Rate, req.Capacity = key, 10, 10
				if req.Spread == 0 {
					req.Spread = 1
				}
				rep := lease(t, s, req)
				// What real time refilled beyond the waits may be granted
				// too, or left in the bucket.
				slack := clock.slack(rep.StoreTime, sp.wait, req.Rate)
				if rep.Granted < sp.granted || float64(rep.Granted-sp.granted) > slack {
					t.Fatalf("step %d: granted %d, want %d (+%.3f refilled by real time)", j, rep.Granted, sp.granted, slack)
				}
				if !tokensNear(rep.Tokens, sp.tokens, slack) {
					t.Fatalf("step %d: tokens %v, want %v (+%.3f refilled by real time)", j, rep.Tokens, sp.tokens, slack)
				}
				if got := rep.DemandTotal - lastDemand; got != req.Demand {
					t.Fatalf("step %d: DemandTotal moved by %d, want %d", j, got, req.Demand)
				}
				lastDemand = rep.DemandTotal
				if !storeTimeNear(rep.StoreTime, expect) {
					t.Fatalf("step %d: store time %v is far from %v, the store's time before the steps and their waits", j, rep.StoreTime, expect)
				}
			}
		})
	}
	t.Run("bad requests are refused", func(t *testing.T) {
		s, _ := open(t)
		for _, req := range []store.LeaseRequest{
			{Key: "", Rate: 1, Capacity: 1, Spread: 1},
			{Key: "k", Rate: 0, Capacity: 1, Spread: 1},
			{Key: "k", Rate: 1, Capacity: -1, Spread: 1},
			{Key: "k", Rate: 1, Capacity: 1, Want: -1, Spread: 1},
			{Key: "k", Rate: 1, Capacity: 1, Spread: 0},
			{Key: "k", Rate: 1, Capacity: 1, Spread: 1, Debt: -1},
			{Key: "k", Rate: 1, Capacity: 1, Spread: 1, Demand: -1},
		} {
			if _, err := s.Lease(context.Background(), req); err == nil {
				t.Errorf("Lease(%+v) succeeded, want an error", req)
			}
		}
	})
	t.Run("a probe writes nothing", func(t *testing.T) {
		s, advance := open(t)
		probe := store.LeaseRequest{Key: "probe", Rate: 10, Capacity: 10, Spread: 1}
		first := lease(t, s, probe)
		if first.Tokens != 10 || first.DemandTotal != 0 {
			t.Fatalf("probe of a new bucket: %+v", first)
		}
		lease(t, s, store.LeaseRequest{Key: "probe", Rate: 10, Capacity: 10, Want: 2, Min: 1, Spread: 1})
		advance(400 * time.Millisecond) // 8 + 4: 2 over the cap
		lease(t, s, probe)              // must not move the refill clock
		advance(200 * time.Millisecond) // 8 + 6: 4 over the cap
		// The debt of 5 is paid by the 4 wasted since the last write,
		// leaving 1 to charge: 9. Had the probe written, only 2 would
		// have been wasted since, and 7 would be left.
		rep := lease(t, s, store.LeaseRequest{Key: "probe", Rate: 10, Capacity: 10, Debt: 5, Spread: 1})
		clock := refill{last: first.StoreTime}
		if slack := clock.slack(rep.StoreTime, 600*time.Millisecond, 10); !tokensNear(rep.Tokens, 9, slack) {
			t.Fatalf("tokens %v, want 9 (+%.3f refilled by real time): the probe wrote", rep.Tokens, slack)
		}
	})
	t.Run("a capacity shrink clamps the bucket", func(t *testing.T) {
		s, _ := open(t)
		lease(t, s, store.LeaseRequest{Key: "shrink", Rate: 1, Capacity: 100, Want: 1, Min: 1, Spread: 1})
		rep := lease(t, s, store.LeaseRequest{Key: "shrink", Rate: 1, Capacity: 10, Want: 1, Min: 1, Spread: 1})
		if rep.Tokens > 9.5 {
			t.Fatalf("tokens %v after capacity fell to 10", rep.Tokens)
		}
	})
}

// testExactTake is the store operation of an exact plan
// (docs/design.md [plan-semantics]): a call with Want = Min = cost and
// Spread 1 takes cost or nothing, atomically, so that concurrent calls
// from any number of clients grant exactly the bucket's tokens.
func testExactTake(t *testing.T, open Opener) {
	s, _ := open(t)
	for round := 0; round < 10; round++ {
		key := fmt.Sprintf("exact-%d", round)
		var granted atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			cost := int64(1 + i%2) // costs of 1 and 2 against 7 tokens
			wg.Go(func() {
				rep, err := s.Lease(context.Background(), store.LeaseRequest{
					Key: key, Rate: minRate, Capacity: 7, Want: cost, Min: cost, Spread: 1, Demand: cost})
				if err != nil {
					t.Error(err)
					return
				}
				if rep.Granted != 0 && rep.Granted != cost {
					t.Errorf("granted %d of a take of %d", rep.Granted, cost)
				}
				if rep.Tokens < 0 {
					t.Errorf("tokens %v after a take", rep.Tokens)
				}
				granted.Add(rep.Granted)
			})
		}
		wg.Wait()
		if g := granted.Load(); g < 6 || g > 7 {
			t.Fatalf("round %d: %d granted from 7 tokens, want 6 or 7 (no take past the tokens, and one of 1 or 2 always fits while 2 are left)", round, g)
		}
		if rep := lease(t, s, store.LeaseRequest{Key: key, Rate: minRate, Capacity: 7, Spread: 1}); rep.Tokens+float64(granted.Load()) > 7+1e-6 {
			t.Fatalf("round %d: %v tokens left after %d granted from 7", round, rep.Tokens, granted.Load())
		}
	}
}

// minRate is region.MinRate, the slowest refill a plan may have: a take
// on it sees no refill within the test.
const minRate = 1e-6
