package region

import (
	"context"
	"errors"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// coarseTick is the resolution of the decision clock while Run runs.
const coarseTick = 500 * time.Microsecond

// Run is the Limiter's background loop. Its tickers come from Config.Clock,
// so a test drives it by advancing a clock.Manual. With Config.Clock nil it
// keeps the coarse decision clock (see Limiter.now); every SweepInterval it
// gives the unspent permits of expired leases back to the store, so that an
// idle process hoards nothing for longer than LeaseTTL + SweepInterval;
// every FlushInterval it hands usage deltas to Config.Usage. When ctx ends
// it returns every lease and flushes usage (Drain), then returns nil.
// With Config.Clock nil it also probes an open breaker in the background
// (probeInBackground), so that recovery waits neither for a miss nor for a
// store client's reconnection within StoreTimeout.
func (l *Limiter) Run(ctx context.Context) error {
	var tick <-chan time.Time
	if l.system {
		t := l.clock.NewTicker(coarseTick)
		defer t.Stop()
		tick = t.C()
		l.coarse.Store(int64(time.Since(l.start)) + 1)
		defer l.coarse.Store(0)
		defer l.calls.runProbes()()
	}
	defer l.quotas.wait() // quota base requests in flight (QuotaBaseTimeout at most)
	sweeps := l.clock.NewTicker(l.cfg.SweepInterval)
	defer sweeps.Stop()
	flushes := l.clock.NewTicker(l.cfg.FlushInterval)
	defer flushes.Stop()
	for {
		select {
		case <-tick:
			l.coarse.Store(int64(time.Since(l.start)) + 1)
			l.calls.probeInBackground(ctx)
		case <-sweeps.C():
			l.sweeper.sweep(ctx)
		case <-flushes.C():
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

// probeKey is the key background probes read; a probe writes nothing.
const probeKey = "quota-breaker-probe"

// maxProbes bounds the background probes in flight.
const maxProbes = 4

// sweeper gives back what the shards hold for the store: the unspent
// permits of expired leases and of evicted keys (shard.returns) and the
// debts of degraded buckets, each return through the store client, and
// accounts what went back as negative leased usage. It has no state of
// its own.
type sweeper struct{ l *Limiter }

// sweep gives back the unspent permits of expired leases and of evicted keys,
// charges what degraded buckets allowed, and returns how many permits went
// back. While the breaker is open it calls the store only as the probe.
func (sw *sweeper) sweep(ctx context.Context) int64 {
	sw.l.slots.sweep(sw.l.now())
	return sw.giveBack(ctx, false)
}

// Drain gives back every lease, expired or not, and flushes usage: for a
// graceful shutdown.
func (l *Limiter) Drain(ctx context.Context) {
	l.sweeper.giveBack(ctx, true)
	l.Flush()
}

// giveBack returns expired leases (all leases when all is set) and charges
// the debts of degraded buckets (docs/design.md [degraded-debt]). While the
// breaker is open it waits for the cooldown and then its first call is a
// probe that writes nothing, so that an idle process recovers too; Drain
// tries regardless, because it is the last chance.
func (sw *sweeper) giveBack(ctx context.Context, all bool) int64 {
	probing := false
	if sw.l.breaker.current() != BreakerClosed {
		if sw.l.calls.inBackground() && !all {
			return 0 // the background probe closes the breaker first
		}
		probing = sw.l.breaker.allow(sw.l.now())
		if !probing && !all {
			return 0
		}
	}
	called := false
	defer func() {
		if probing && !called {
			sw.l.breaker.abandon()
		}
	}()
	// Debts go only with a probe or after a call that succeeded (see
	// breaker.healthy).
	chargeDebts := probing || all || sw.l.breaker.healthy()
	var back int64
	var batch []pendingReturn
	for i := range sw.l.shards {
		sh := &sw.l.shards[i]
		batch = sw.collect(sh, batch[:0], all, chargeDebts)
		for j, r := range batch {
			if ctx.Err() != nil {
				sw.requeue(sh, batch[j:])
				return back
			}
			called = true
			switch sw.send(ctx, &batch[j], probing) {
			case returnFailed:
				sw.requeue(sh, batch[j:])
				return back
			case returnRefused:
				sw.drop(sh, r)
			case returnSent:
				back += r.permits
				sw.account(sh, batch[j])
			}
			probing = false
		}
	}
	return back
}

// collect appends to batch what sh has to give back: the returns
// evictions and failed sweeps left, the permits of expired leases (of every
// lease when all is set), and the debts of degraded buckets when
// chargeDebts is set. Entries mid store call are left alone.
func (sw *sweeper) collect(sh *shard, batch []pendingReturn, all, chargeDebts bool) []pendingReturn {
	now := sw.l.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	batch = append(batch, sh.returns...)
	sh.returns = sh.returns[:0]
	for k, e := range sh.keys {
		if e.busy {
			continue
		}
		var debt int64
		if chargeDebts {
			// The store is back (the breaker is closed): charge what the
			// key was allowed while it was not.
			debt = sh.takeDebtLocked(k, e, now, sw.l.cfg.BreakerCooldown)
		}
		live := sw.l.leases.live(e, now)
		if q := sh.quotas[k]; q != nil {
			if r, ok := sw.l.quotas.collectLocked(k, e, q, debt, now, all, live, chargeDebts); ok {
				batch = append(batch, r)
			}
			continue
		}
		if debt == 0 && (e.permits <= 0 || (!all && live)) {
			continue
		}
		r := pendingReturn{k, 0, debt, float64(e.rate), float64(e.capacity), nil}
		if all || !live {
			r.permits = e.releaseLease()
		}
		batch = append(batch, r)
	}
	return batch
}

// returnOutcome is what became of one return sent to the store.
type returnOutcome uint8

const (
	returnSent    returnOutcome = iota // the store took it
	returnFailed                       // the store is unavailable: keep it for the next sweep
	returnRefused                      // the store refused it for its key (store.ErrStoreRejected): dropped
)

// send gives r back to the store, probing first when probe is set;
// the breaker is told either way. A return the store refuses for a reason
// of its key's own is dropped, not kept: its permits are lost (which
// under-admits) and its debt forgiven, and the other returns go on.
func (sw *sweeper) send(ctx context.Context, r *pendingReturn, probe bool) returnOutcome {
	// A probe writes nothing: a return or a debt sent to a store that is
	// still slow may run there after the call timed out, and would then be
	// sent again.
	if probe && !sw.l.calls.probe(ctx, r.key, r.rate, r.capacity) {
		return returnFailed
	}
	if r.quota != nil {
		// The quota part goes first and then leaves r, so that a retry of
		// a rate part that fails after it does not send it twice.
		if sw.l.quotas.sendReturn(ctx, *r) == returnFailed {
			return returnFailed
		}
		r.quota = nil
	}
	if r.permits == 0 && r.debt == 0 {
		return returnSent
	}
	req := store.LeaseRequest{Key: r.key, Rate: r.rate, Capacity: r.capacity, Return: r.permits, Debt: r.debt, Spread: 1, Grace: sw.l.cfg.DebtGrace}
	_, _, err := sw.l.calls.lease(ctx, req, judgeReach)
	if store.IsTransient(err) {
		return returnFailed
	}
	if err != nil {
		return returnRefused
	}
	return returnSent
}

// requeue keeps permits whose return failed for the next sweep.
func (sw *sweeper) requeue(sh *shard, rs []pendingReturn) {
	sh.mu.Lock()
	sh.returns = append(sh.returns, rs...)
	sh.mu.Unlock()
}

// drop forgets a return the store refused: its permits are no longer
// outstanding anywhere.
func (sw *sweeper) drop(sh *shard, r pendingReturn) {
	sh.mu.Lock()
	sh.outstanding -= r.permits
	sh.mu.Unlock()
}

// account records permits that went back as negative leased usage of
// the key's current window.
func (sw *sweeper) account(sh *shard, r pendingReturn) {
	now := sw.l.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.outstanding -= r.permits
	if e := sh.keys[r.key]; e != nil && e.fits(r.permits) {
		sw.l.rollLocked(sh, r.key, e, now)
		e.leased -= r.permits
		return
	}
	ws := WindowStart(r.key, time.Unix(0, sw.l.storeNanos(now)), sw.l.cfg.Window)
	sh.pending = append(sh.pending, Usage{Key: r.key, WindowStart: ws, Leased: -r.permits})
}

// Flush hands every usage delta to Config.Usage now. Each delta is handed
// over exactly once.
func (l *Limiter) Flush() {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	batch := l.flushBuf.Get()
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
	l.flushBuf.Put(batch)
}

// Stats is a snapshot of the Limiter, for metrics and tests.
type Stats struct {
	TrackedKeys        int           // keys holding local state
	OutstandingPermits int64         // permits leased and not yet spent or returned
	StoreCalls         int64         // store calls made, returns included
	Allowed            int64         // decisions that spent
	Rejected           int64         // decisions that did not
	DegradedDecisions  int64         // decisions taken while the store was unavailable, by any failure policy
	ShadowRejected     int64         // checks a shadow plan allowed and would have rejected (in neither Allowed nor Rejected)
	Breaker            BreakerState  // the circuit breaker
	ClockOffset        time.Duration // store clock minus local clock
	Processes          int           // the process count in use

	// BreakerFailures counts the store calls that counted against the
	// store's availability (failed, timed out, or answered slower than
	// StoreTimeout) since New.
	BreakerFailures int64
	// KeyErrors counts the store calls the store refused for a reason of
	// their key's own (store.ErrStoreRejected: a bucket key of another type, a
	// script error) since New. They do not count toward the breaker.
	KeyErrors int64
	// QuotaCalls counts the calls to quota counters among StoreCalls;
	// QuotaBaseRequests the ledger base requests made, and
	// QuotaBaseFailures those that failed (docs/design.md [quotas]).
	QuotaCalls, QuotaBaseRequests, QuotaBaseFailures int64
}

// Stats returns a snapshot. It takes every shard lock in turn: call it at
// metric-scrape rates, not per decision.
func (l *Limiter) Stats() Stats {
	s := Stats{
		BreakerFailures: l.breaker.failuresTotal(),
		Breaker:         l.breaker.current(),
		ClockOffset:     time.Duration(l.offset.get()),
		Processes:       l.leases.processes(),
	}
	l.calls.stats(&s)
	l.quotas.stats(&s)
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		s.TrackedKeys += len(sh.keys)
		s.OutstandingPermits += sh.outstanding
		s.Allowed += sh.allowed
		s.Rejected += sh.rejected
		s.DegradedDecisions += sh.degraded
		s.ShadowRejected += sh.shadowRejected
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
		LocalShare: e.localShare(l.leases.processes(), l.cfg.LocalSharePrior),
		Degraded:   e.inDegraded,
	}
	if e.syncAt != 0 {
		ks.Stale = time.Duration(now - e.syncAt)
	}
	return ks, nil
}
