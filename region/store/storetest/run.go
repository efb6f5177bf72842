// Package storetest is the conformance suite of the region's store
// contract (region/store): the answers every store must give, run against
// memstore and redisstore (a single Redis and a Redis Cluster) by their
// own tests, and by any other store's.
//
// Run drives a store through step tables for every contract it
// implements (Store, and RequestStore, SlotStore and QuotaStore when it
// does), and through a randomized equivalence test that applies one seeded
// sequence of operations to the store and to memstore and asks for the
// same answers, so that the Redis scripts and the in-process store are
// held to one bucket arithmetic.
//
// Time: a store under test runs on its own clock. Opener's advance moves
// it forward; a store whose clock cannot be moved (Redis' TIME) advances
// by waiting real time, and the suite allows for the refill that real
// time adds between steps.
package storetest

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// Opener returns a new, empty store for one test, and advance, which moves
// the store's clock forward by at least d. Stores opened for one test must
// not share state (a Redis store gets a key prefix of its own). Opener is
// called from parallel tests.
type Opener func(t *testing.T) (s store.Store, advance func(d time.Duration))

// WaitReal is advance for a store whose clock cannot be moved: it lets d
// of real time pass.
func WaitReal(d time.Duration) { <-time.After(d) }

// Run runs the conformance suite against the stores open makes.
func Run(t *testing.T, open Opener) {
	t.Run("Lease", func(t *testing.T) { t.Parallel(); testLease(t, open) })
	t.Run("ExactTake", func(t *testing.T) { t.Parallel(); testExactTake(t, open) })
	t.Run("Request", func(t *testing.T) { t.Parallel(); testRequest(t, open) })
	t.Run("Slots", func(t *testing.T) { t.Parallel(); testSlots(t, open) })
	t.Run("Quota", func(t *testing.T) { t.Parallel(); testQuota(t, open) })
	t.Run("Equivalence", func(t *testing.T) { t.Parallel(); testEquivalence(t, open) })
}

func lease(t *testing.T, s store.Store, req store.LeaseRequest) store.LeaseReply {
	t.Helper()
	rep, err := s.Lease(context.Background(), req)
	if err != nil {
		t.Fatalf("Lease(%+v): %v", req, err)
	}
	return rep
}

// tokensNear reports whether got is want, or up to 0.5 above it: real
// clocks refill a little between steps.
func tokensNear(got, want float64) bool { return got >= want-1e-9 && got <= want+0.5 }

// storeTimeNear reports whether a reply's store time is within 30 s of
// now (manual clocks run ahead of it).
func storeTimeNear(st time.Time) bool { return math.Abs(time.Since(st).Seconds()) <= 30 }
