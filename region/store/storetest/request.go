package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// testRequest runs the RequestStore contract (docs/design.md
// [idempotency]) when the store implements it: a check charged once and
// replayed, refunds bounded by the charge, charges into debt, the record's
// horizon, refusals.
func testRequest(t *testing.T, open Opener) {
	probe, _ := open(t)
	if _, ok := probe.(store.RequestStore); !ok {
		t.Skipf("%T records no request ids", probe)
	}
	type step struct {
		wait     time.Duration
		op       store.RequestOp
		id       string
		cost     int64
		lease    int64 // when > 0, a Lease of this many permits instead (Min = lease)
		status   store.RequestStatus
		allowed  bool
		charged  int64
		refunded int64
		applied  int64   // RequestReply.Cost
		tokens   float64 // ±0.5 for real clocks
	}
	const (
		check  = store.RequestCheck
		refund = store.RequestRefund
		charge = store.RequestCharge
	)
	cases := []struct {
		name  string
		steps []step
	}{
		{"a check is charged once and replayed", []step{
			{op: check, id: "a", cost: 4, allowed: true, charged: 4, applied: 4, tokens: 6},
			{op: check, id: "a", cost: 4, status: store.RequestReplayed, allowed: true, charged: 4, applied: 4, tokens: 6},
			{op: check, id: "a", cost: 9, status: store.RequestReplayed, allowed: true, charged: 4, applied: 4, tokens: 6},
			{op: check, id: "b", cost: 4, allowed: true, charged: 4, applied: 4, tokens: 2},
		}},
		{"a rejection is recorded and replayed, even after refill", []step{
			{op: check, id: "a", cost: 8, allowed: true, charged: 8, applied: 8, tokens: 2},
			{op: check, id: "b", cost: 5, tokens: 2, applied: 5},
			{wait: 400 * time.Millisecond, op: check, id: "b", cost: 5, status: store.RequestReplayed, applied: 5, tokens: 6},
		}},
		{"a refund gives back at most the charge, once", []step{
			{op: check, id: "a", cost: 6, allowed: true, charged: 6, applied: 6, tokens: 4},
			{op: refund, id: "a", cost: 7, status: store.RequestOverRefund, allowed: true, charged: 6, tokens: 4},
			{op: refund, id: "a", cost: 5, allowed: true, charged: 6, refunded: 5, applied: 5, tokens: 9},
			{op: refund, id: "a", cost: 5, status: store.RequestReplayed, allowed: true, charged: 6, refunded: 5, applied: 5, tokens: 9},
			{op: refund, id: "a", cost: 1, status: store.RequestConflict, allowed: true, charged: 6, refunded: 5, applied: 5, tokens: 9},
		}},
		{"a refund is capped at capacity in the bucket", []step{
			{op: check, id: "a", cost: 2, allowed: true, charged: 2, applied: 2, tokens: 8},
			{wait: 300 * time.Millisecond, lease: 1, tokens: 9}, // refilled to the cap, then one leased
			{op: refund, id: "a", cost: 2, allowed: true, charged: 2, refunded: 2, applied: 2, tokens: 10},
		}},
		{"a refund of an unknown or rejected id is refused", []step{
			{op: refund, id: "nope", cost: 1, status: store.RequestUnknown, tokens: 10},
			{op: check, id: "big", cost: 11, applied: 11, tokens: 10},
			{op: refund, id: "big", cost: 1, status: store.RequestOverRefund, tokens: 10},
		}},
		{"a charge goes into debt, down to minus capacity, once", []step{
			{op: charge, id: "c", cost: 14, charged: 14, applied: 14, tokens: -4},
			{op: charge, id: "c", cost: 14, status: store.RequestReplayed, charged: 14, applied: 14, tokens: -4},
			{op: charge, id: "c", cost: 3, status: store.RequestConflict, charged: 14, applied: 14, tokens: -4},
			{op: check, id: "x", cost: 1, applied: 1, tokens: -4},
			{lease: 1, tokens: -4},
			{op: charge, id: "d", cost: 30, charged: 30, applied: 30, tokens: -10},
		}},
		{"a charge on a checked id adds to what a refund may give back", []step{
			{op: check, id: "a", cost: 2, allowed: true, charged: 2, applied: 2, tokens: 8},
			{op: charge, id: "a", cost: 3, allowed: true, charged: 5, applied: 3, tokens: 5},
			{op: refund, id: "a", cost: 5, allowed: true, charged: 5, refunded: 5, applied: 5, tokens: 10},
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, advance := open(t)
			rs := s.(store.RequestStore)
			key := fmt.Sprintf("request-%d", i)
			var clock refill
			for j, sp := range tc.steps {
				if sp.wait > 0 {
					advance(sp.wait)
				}
				if sp.lease > 0 {
					rep := lease(t, s, store.LeaseRequest{Key: key, Rate: 10, Capacity: 10, Want: sp.lease, Min: sp.lease, Spread: 1})
					if slack := clock.slack(rep.StoreTime, sp.wait, 10); !tokensNear(rep.Tokens, sp.tokens, slack) {
						t.Fatalf("step %d: lease left %v tokens, want %v (+%.3f refilled by real time)", j, rep.Tokens, sp.tokens, slack)
					}
					continue
				}
				rep, err := rs.Request(context.Background(), store.RequestCall{Op: sp.op, Key: key, ID: sp.id,
					Rate: 10, Capacity: 10, Cost: sp.cost, Horizon: time.Minute})
				if err != nil {
					t.Fatalf("step %d: %v", j, err)
				}
				got := rep
				got.Tokens, got.StoreTime = 0, time.Time{}
				want := store.RequestReply{Status: sp.status, Allowed: sp.allowed, Charged: sp.charged, Refunded: sp.refunded, Cost: sp.applied}
				if got != want {
					t.Fatalf("step %d (%s %s %d): got %+v, want %+v", j, sp.op, sp.id, sp.cost, got, want)
				}
				if slack := clock.slack(rep.StoreTime, sp.wait, 10); !tokensNear(rep.Tokens, sp.tokens, slack) {
					t.Fatalf("step %d: tokens %v, want %v (+%.3f refilled by real time)", j, rep.Tokens, sp.tokens, slack)
				}
			}
		})
	}
	t.Run("the record expires after the horizon", func(t *testing.T) {
		s, advance := open(t)
		rs := s.(store.RequestStore)
		call := store.RequestCall{Op: store.RequestCheck, Key: "horizon", ID: "r1", Rate: 1e-3, Capacity: 10, Cost: 3, Horizon: 300 * time.Millisecond}
		for i, want := range []store.RequestStatus{store.RequestApplied, store.RequestReplayed} {
			if rep, err := rs.Request(context.Background(), call); err != nil || rep.Status != want {
				t.Fatalf("call %d: %+v %v, want status %d", i, rep, err, want)
			}
		}
		advance(400 * time.Millisecond)
		rep, err := rs.Request(context.Background(), call)
		if err != nil || rep.Status != store.RequestApplied || rep.Tokens > 4.01 {
			t.Fatalf("after the horizon: %+v %v, want charged again (4 tokens left)", rep, err)
		}
	})
	t.Run("bad calls are refused", func(t *testing.T) {
		s, _ := open(t)
		rs := s.(store.RequestStore)
		good := store.RequestCall{Op: store.RequestCheck, Key: "k", ID: "id", Rate: 1, Capacity: 1, Cost: 1, Horizon: time.Second}
		for i, mod := range []func(*store.RequestCall){
			func(c *store.RequestCall) { c.Op = 0 },
			func(c *store.RequestCall) { c.Key = "" },
			func(c *store.RequestCall) { c.ID = "" },
			func(c *store.RequestCall) { c.ID = strings.Repeat("x", store.MaxRequestIDLen+1) },
			func(c *store.RequestCall) { c.ID = "a b" },
			func(c *store.RequestCall) { c.Rate = 0 },
			func(c *store.RequestCall) { c.Cost = 0 },
			func(c *store.RequestCall) { c.Horizon = 0 },
		} {
			c := good
			mod(&c)
			if _, err := rs.Request(context.Background(), c); !errors.Is(err, store.ErrStoreRejected) {
				t.Fatalf("case %d: %v, want ErrStoreRejected", i, err)
			}
		}
	})
}
