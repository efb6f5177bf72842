package region

import (
	"context"
	"errors"
	"time"
)

// coarseTick is the resolution of the decision clock while Run runs.
const coarseTick = 500 * time.Microsecond

// Run is the Limiter's background loop: it keeps the decision clock (see
// Limiter.now); every SweepInterval it gives the
// unspent permits of expired leases back to the store, so that an idle
// process hoards nothing for longer than LeaseTTL + SweepInterval; every
// FlushInterval it hands usage deltas to Config.Usage. When ctx ends it
// returns every lease and flushes usage (Drain), then returns nil.
func (l *Limiter) Run(ctx context.Context) error {
	var tick <-chan time.Time
	if l.system {
		t := time.NewTicker(coarseTick)
		defer t.Stop()
		tick = t.C
		l.coarse.Store(int64(time.Since(l.start)) + 1)
		defer l.coarse.Store(0)
	}
	sweep := time.NewTicker(l.cfg.SweepInterval)
	defer sweep.Stop()
	flush := time.NewTicker(l.cfg.FlushInterval)
	defer flush.Stop()
	for {
		select {
		case <-tick:
			l.coarse.Store(int64(time.Since(l.start)) + 1)
		case <-sweep.C:
			l.Sweep(ctx)
		case <-flush.C:
			l.Flush()
		case <-ctx.Done():
			l.coarse.Store(0)
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			l.Drain(dctx)
			cancel()
			return nil
		}
	}
}

// Sweep gives back the unspent permits of expired leases and of evicted keys,
// charges what degraded buckets allowed, and returns how many permits went
// back. While the breaker is open it calls the store only as the probe.
func (l *Limiter) Sweep(ctx context.Context) int64 {
	return l.giveBack(ctx, false)
}

// Drain gives back every lease, expired or not, and flushes usage: for a
// graceful shutdown.
func (l *Limiter) Drain(ctx context.Context) {
	l.giveBack(ctx, true)
	l.Flush()
}

// giveBack returns expired leases (all leases when all is set) and charges
// the debts of degraded buckets. While the breaker is open it waits for the
// cooldown and then its first call is a probe that writes nothing, so that
// an idle process recovers too; Drain tries regardless, because it is the last chance.
func (l *Limiter) giveBack(ctx context.Context, all bool) int64 {
	probing := false
	if l.breaker.current() != BreakerClosed {
		probing = l.breaker.allow(l.now())
		if !probing && !all {
			return 0
		}
	}
	called := false
	defer func() {
		if probing && !called {
			l.breaker.abandon()
		}
	}()
	// Debts go only with a probe or after a call that succeeded (see
	// breaker.healthy).
	chargeDebts := probing || all || l.breaker.healthy()
	var back int64
	var batch []pendingReturn
	for i := range l.shards {
		sh := &l.shards[i]
		now := l.now()
		sh.mu.Lock()
		batch = append(batch[:0], sh.returns...)
		sh.returns = sh.returns[:0]
		for k, e := range sh.keys {
			if e.busy {
				continue
			}
			var debt int64
			if b := sh.buckets[k]; b != nil && b.debt > 0 && chargeDebts {
				// The store is back (the breaker is closed): charge what the
				// key was allowed while it was not.
				debt = b.debt
				delete(sh.buckets, k)
				e.inDegraded = false
			}
			live := l.leaseLive(e, now)
			if debt == 0 && (e.permits <= 0 || (!all && live)) {
				continue
			}
			if !all && live {
				batch = append(batch, pendingReturn{k, 0, debt, float64(e.rate), float64(e.capacity)})
				continue
			}
			batch = append(batch, pendingReturn{k, e.permits, debt, float64(e.rate), float64(e.capacity)})
			if e.permits > int64(e.nextLease)/2 {
				e.nextLease = max(e.nextLease/2, 1)
			}
			e.permits = 0
		}
		sh.mu.Unlock()
		for j, r := range batch {
			if ctx.Err() != nil {
				l.requeue(sh, batch[j:])
				return back
			}
			called = true
			if probing {
				// Probe with a call that writes nothing first: a return or a
				// debt sent to a store that is still slow may run there after
				// the call timed out, and would then be sent again.
				probing = false
				_, lat, err := l.callStore(ctx, LeaseRequest{Key: r.key, Rate: r.rate, Capacity: r.capacity, Spread: 1})
				if err != nil || lat > l.cfg.StoreTimeout {
					l.breaker.failure(l.now())
					l.requeue(sh, batch[j:])
					return back
				}
				l.breaker.success()
			}
			_, _, err := l.callStore(ctx, LeaseRequest{Key: r.key, Rate: r.rate, Capacity: r.capacity, Return: r.permits, Debt: r.debt, Spread: 1, Grace: l.cfg.DebtGrace})
			if err != nil {
				l.breaker.failure(l.now())
				l.requeue(sh, batch[j:])
				return back
			}
			l.breaker.success()
			back += r.permits
			l.accountReturn(sh, r)
		}
	}
	return back
}

// requeue keeps permits whose return failed for the next sweep.
func (l *Limiter) requeue(sh *shard, rs []pendingReturn) {
	sh.mu.Lock()
	sh.returns = append(sh.returns, rs...)
	sh.mu.Unlock()
}

// accountReturn records permits that went back as negative leased usage of
// the key's current window.
func (l *Limiter) accountReturn(sh *shard, r pendingReturn) {
	now := l.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.outstanding -= r.permits
	if e := sh.keys[r.key]; e != nil && e.fits(r.permits) {
		l.rollLocked(sh, r.key, e, now)
		e.leased -= int32(r.permits)
		return
	}
	ws := WindowStart(r.key, time.Unix(0, l.storeNanos(now)), l.cfg.Window)
	sh.pending = append(sh.pending, Usage{Key: r.key, WindowStart: ws, Leased: -r.permits})
}

// Flush hands every usage delta to Config.Usage now. Each delta is handed
// over exactly once.
func (l *Limiter) Flush() {
	var batch []Usage
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		batch = append(batch, sh.pending...)
		sh.pending = sh.pending[:0]
		for k, e := range sh.keys {
			if e.hasUsage() {
				batch = append(batch, e.takeUsage(k, l.cfg.Window))
			}
		}
		sh.mu.Unlock()
	}
	if len(batch) > 0 && l.cfg.Usage != nil {
		l.cfg.Usage.Record(batch)
	}
}

// Stats is a snapshot of the Limiter, for metrics and tests.
type Stats struct {
	TrackedKeys        int           // keys holding local state
	OutstandingPermits int64         // permits leased and not yet spent or returned
	StoreCalls         int64         // store calls made, returns included
	Allowed            int64         // decisions that spent
	Rejected           int64         // decisions that did not
	DegradedDecisions  int64         // decisions taken from a degraded bucket
	Breaker            BreakerState  // the circuit breaker
	ClockOffset        time.Duration // store clock minus local clock
	Processes          int           // the process count in use
}

// Stats returns a snapshot. It takes every shard lock in turn: call it at
// metric-scrape rates, not per decision.
func (l *Limiter) Stats() Stats {
	s := Stats{
		StoreCalls:  l.storeCalls.Load(),
		Breaker:     l.breaker.current(),
		ClockOffset: time.Duration(l.offset.get()),
		Processes:   l.processes(),
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		s.TrackedKeys += len(sh.keys)
		s.OutstandingPermits += sh.outstanding
		s.Allowed += sh.allowed
		s.Rejected += sh.rejected
		s.DegradedDecisions += sh.degraded
		sh.mu.Unlock()
	}
	return s
}

// KeyState is what this process knows of one key.
type KeyState struct {
	Remaining  int64         // regional tokens at the last sync less local spend since
	Stale      time.Duration // age of the last sync
	Lease      int64         // unspent permits held here
	LocalShare float64       // this process's share of the key's regional traffic
	Degraded   bool          // the key's last miss was decided in degraded mode
}

// ErrNotTracked: Peek found no local state for the key.
var ErrNotTracked = errors.New("key not tracked")

// Peek returns this process's state for key without changing it.
func (l *Limiter) Peek(key string) (KeyState, error) {
	h := mapHash(l, key)
	sh := l.shardOf(h)
	now := l.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	if e == nil {
		return KeyState{}, ErrNotTracked
	}
	ks := KeyState{
		Remaining:  max(e.remaining, 0),
		Lease:      e.permits,
		LocalShare: e.localShare(l.processes(), l.cfg.LocalSharePrior),
		Degraded:   e.inDegraded,
	}
	if e.syncAt != 0 {
		ks.Stale = time.Duration(now - e.syncAt)
	}
	return ks, nil
}
