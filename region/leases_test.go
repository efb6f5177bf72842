package region_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
)

// TestIdleLeasesGoBack: Run gives an idle process's permits back to the
// store within LeaseTTL + SweepInterval, so other processes can use them,
// and its flush accounts for them; measured as outstanding permits and
// usage. (TestSweep, inside the package, checks each sweep's returns.)
func TestIdleLeasesGoBack(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 1000, Capacity: 1000}, nil)
	for k := 0; k < 50; k++ {
		key := "idle-" + string(rune('a'+k%26)) + string(rune('a'+k/26))
		for i := 0; i < 40; i++ {
			f.allow(t, key, 1)
		}
	}
	held := f.lim.Stats().OutstandingPermits
	if held == 0 {
		t.Fatal("no permits outstanding after a burst: the test proves nothing")
	}
	runOn(t, f.lim, f.clock)
	cfg := region.DefaultConfig()
	for d := time.Duration(0); d < cfg.LeaseTTL+cfg.SweepInterval; d += cfg.SweepInterval {
		f.clock.Advance(cfg.SweepInterval)
	}
	testserver.WaitFor(t, 5*time.Second, time.Millisecond, func() error {
		if n := f.lim.Stats().OutstandingPermits; n != 0 {
			return fmt.Errorf("%d of %d permits still outstanding", n, held)
		}
		return nil
	})
	// The store has them again, and the usage Run flushes says so.
	f.clock.Advance(cfg.FlushInterval)
	testserver.WaitFor(t, 5*time.Second, time.Millisecond, func() error {
		tot := f.usage.totals()
		if len(tot) != 50 {
			return fmt.Errorf("usage of %d keys flushed, want 50", len(tot))
		}
		for key, u := range tot {
			if u.Leased != u.Spent {
				return fmt.Errorf("%s: leased %d, spent %d: returned permits not accounted", key, u.Leased, u.Spent)
			}
		}
		return nil
	})
}

// TestEvictionKeepsUsage: keys evicted under the MaxKeys cap hand over their
// usage and permits first; totals stay exact.
func TestEvictionKeepsUsage(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 1000, Capacity: 1000}, func(c *region.Config) {
		c.MaxKeys = 640
		// The store's latency is not what this test is about: a call past
		// the 5 ms default on a loaded machine would be decided degraded,
		// spent without a lease, and leased would not equal spent.
		c.StoreTimeout = time.Minute
	})
	const keys, rounds = 3000, 3
	for r := 0; r < rounds; r++ {
		for k := 0; k < keys; k++ {
			f.allow(t, keyName(k), 2)
		}
	}
	if n := f.lim.Stats().TrackedKeys; n > 704 {
		t.Fatalf("%d keys tracked, cap 640 (+10%%)", n)
	}
	f.lim.Drain(context.Background())
	tot := f.usage.totals()
	if len(tot) != keys {
		t.Fatalf("usage for %d keys, want %d", len(tot), keys)
	}
	for k, u := range tot {
		if u.Spent != 2*rounds || u.Degraded != 0 {
			t.Fatalf("%s spent %d (%d degraded), want %d, none degraded", k, u.Spent, u.Degraded, 2*rounds)
		}
		if u.Leased != u.Spent {
			t.Fatalf("%s leased %d after drain, spent %d", k, u.Leased, u.Spent)
		}
	}
	if s := f.lim.Stats(); s.OutstandingPermits != 0 {
		t.Fatalf("%d permits outstanding after drain", s.OutstandingPermits)
	}
}

// TestAccountingWindows: usage lands in the key's jittered window, and a
// window roll hands the old window's deltas over separately.
func TestAccountingWindows(t *testing.T) {
	f := newFixture(t, region.Plan{Rate: 1000, Capacity: 1000}, nil)
	w := region.DefaultConfig().Window
	start := f.clock.Now()
	first := region.WindowStart("k", start, w)
	f.allow(t, "k", 5)
	next := first.Add(w)
	f.clock.Advance(next.Sub(start) + time.Millisecond)
	f.allow(t, "k", 7)
	f.lim.Flush()
	byWindow := map[time.Time]int64{}
	for _, u := range f.usage.us {
		byWindow[u.WindowStart] += u.Spent
	}
	if byWindow[first] != 5 || byWindow[next] != 7 {
		t.Fatalf("spent by window %v, want 5 in %v and 7 in %v", byWindow, first, next)
	}
	if !region.WindowStart("acct_1", start, w).Equal(region.WindowStart("acct_1", start.Add(time.Millisecond), w)) {
		t.Fatal("window start moved within a window")
	}
}

// TestInvalidateReleases: a share change invalidates the lease and the next
// decision leases at the new share.
func TestInvalidateReleases(t *testing.T) {
	share := &settableShare{v: 1}
	f := newFixture(t, region.Plan{Rate: 1000, Capacity: 1000}, func(c *region.Config) { c.Shares = share })
	for i := 0; i < 10; i++ {
		f.allow(t, "k", 1)
	}
	share.set(0.5)
	f.lim.Invalidate("k")
	d := f.allow(t, "k", 1)
	if d.Remaining > 500 {
		t.Fatalf("remaining %d after the share halved, want ≤ 500", d.Remaining)
	}
	f.lim.InvalidateAll()
	before := f.store.Calls()
	f.allow(t, "k", 1)
	if f.store.Calls() != before+1 {
		t.Fatal("InvalidateAll did not send the key back to the store")
	}
}

// TestReshare: a share change ends the lease of a key that is using its
// region's bucket, and not of a key far below its limit.
func TestReshare(t *testing.T) {
	cases := []struct {
		name      string
		spend     int64 // spent before the share changes, of a capacity of 100
		wantCalls int   // store calls the next decision makes
	}{
		{"a key far below its limit keeps its lease", 10, 0},
		{"a key using its bucket takes the new share now", 70, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			share := &settableShare{v: 1}
			f := newFixture(t, region.Plan{Rate: 1, Capacity: 100}, func(c *region.Config) {
				c.Shares = share
				c.AccuracyBudget = 0.5 // leases of up to 30: the last one outlives the spending
			})
			for range tc.spend {
				f.allow(t, "k", 1)
			}
			ks, _ := f.lim.Peek("k")
			if ks.Lease == 0 {
				t.Fatalf("no lease left after spending %d: %+v", tc.spend, ks)
			}
			share.set(0.5)
			f.lim.Reshare("k")
			before := f.store.Calls()
			f.allow(t, "k", 1)
			if got := f.store.Calls() - before; got != tc.wantCalls {
				t.Fatalf("the next decision made %d store calls, want %d", got, tc.wantCalls)
			}
		})
	}
}
