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
// Time: a store under test runs on its own clock, and the suite takes
// every time it needs from that clock (a lease reply's StoreTime), never
// from its own or a fixed date: an in-process store can be opened at any
// instant (memstore's tests run the suite at the edges of the calendar).
// Opener's advance moves the clock forward; a store whose clock cannot be
// moved (Redis' TIME) advances by waiting real time, and the suite allows
// for the refill that real time adds between steps.
package storetest

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/quotaplatform/quota/period"
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

// tokensNear reports whether got is want, or above it by up to 0.5 plus
// slack: real clocks refill a little between steps (refill.slack says how
// much more a loaded machine's did).
func tokensNear(got, want, slack float64) bool { return got >= want-1e-9 && got <= want+0.5+slack }

// refill follows one test key's store time, to tell what the store's
// clock refilled beyond the waits the test made.
type refill struct {
	last  time.Time
	extra time.Duration
}

// slack returns what rate refilled since the key's first reply beyond the
// test's waits, the last of them wait, as of a reply at store time at.
// It is the whole run's, not the last step's: refill wasted past capacity
// in one step pays a debt in a later one (debt credit).
func (r *refill) slack(at time.Time, wait time.Duration, rate float64) float64 {
	if !r.last.IsZero() {
		r.extra += max(0, at.Sub(r.last)-wait)
	}
	r.last = at
	return rate * r.extra.Seconds()
}

// storeNow is the store's clock, read from a lease on a key of its own.
// Every time the suite builds (periods, bases) comes from it, never from
// this process's clock or a fixed date, so that no answer depends on the
// day the suite runs or on the store's clock agreeing with the caller's.
func storeNow(t *testing.T, s store.Store) time.Time {
	t.Helper()
	rep := lease(t, s, store.LeaseRequest{Key: "storetest-clock", Rate: 1, Capacity: 1, Want: 1, Spread: 1})
	if rep.StoreTime.IsZero() {
		t.Fatalf("%T's lease reply carries no store time", s)
	}
	return rep.StoreTime
}

// storeTimeNear reports whether a reply's store time st is within 30 s of
// want, the store time the test expects (manual clocks and real time
// between steps drift a little).
func storeTimeNear(st, want time.Time) bool { return math.Abs(st.Sub(want).Seconds()) <= 30 }

// suiteCalendar is the calendar the suite builds quota periods on: a zone
// with daylight saving time, so that a run at a change meets days of 23
// and 25 hours.
func suiteCalendar(t *testing.T) period.Calendar {
	t.Helper()
	cal, err := period.NewCalendar("Europe/Berlin", 1)
	if err != nil {
		t.Fatalf("calendar: %v", err)
	}
	return cal
}
