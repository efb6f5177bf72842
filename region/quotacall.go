package region

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/quotaplatform/quota/region/store"
)

// The quota calls that renew a key's quota lease (quotas.leaseLocked, and
// quotas.requestLocked for checks with a request id); the ledger bases that
// rebuild a counter; and what a degraded key may spend of its quotas
// while the store is away, kept on those bases.

// quotas is the quota capability (docs/design.md [quotas]): a key's
// quota lease beside its rate lease, the quota counter calls that renew
// and return it, the ledger bases that rebuild a counter, and what a
// degraded key may spend of its quotas. It owns the quota-store part of
// the store contract and its counters; a key's quota state lives in its
// shard (shard.quotas), so that an entry without quotas stays its size.
type quotas struct {
	l     *Limiter
	store store.QuotaStore // nil: the store keeps no quota counters
	// calls counts the quota counter calls among the store calls;
	// baseFetches and baseFailures the ledger base requests and those that
	// failed; fetches the base requests in flight, for Run to wait on.
	calls, baseFetches, baseFailures atomic.Int64
	fetches                          sync.WaitGroup
}

// init makes the capability l's, calling st (nil: none).
func (qs *quotas) init(l *Limiter, st store.QuotaStore) { qs.l, qs.store = l, st }

// wait waits for the ledger base requests in flight.
func (qs *quotas) wait() { qs.fetches.Wait() }

// stats adds the capability's counters to s.
func (qs *quotas) stats(s *Stats) {
	s.QuotaCalls = qs.calls.Load()
	s.QuotaBaseRequests = qs.baseFetches.Load()
	s.QuotaBaseFailures = qs.baseFailures.Load()
}

// want is the quota lease a process asks for: rateWant, or its part
// of QuotaAccuracy of the tightest quota when that is more (docs/design.md
// [quotas]: the bound).
func (qs *quotas) want(m *miss, ps *[store.MaxQuotaPeriods]store.QuotaPeriod, n int, rateWant int64) int64 {
	tightest := ps[0].Limit
	for i := 1; i < n; i++ {
		tightest = min(tightest, ps[i].Limit)
	}
	c := qs.l.cfg.QuotaAccuracy * float64(tightest) * m.share / float64(m.procs)
	return max(m.cost, rateWant, int64(math.Min(c, store.MaxCount)))
}

// callLocked makes the key's quota call: it returns the held quota
// permits, charges what was spent without a grant, sends any fetched
// base, and leases anew. A counter without a base waits for the base
// request in flight first. It returns the quota lease held after the
// call (the old one when the store did not answer), and whether the
// store answered.
func (qs *quotas) callLocked(ctx context.Context, m *miss, q *quotaState, ps *[store.MaxQuotaPeriods]store.QuotaPeriod, n int, held, rateWant int64) (int64, bool) {
	if qs.store == nil {
		// New refuses a plan with quotas on such a store (Validate of the
		// resolver's plans happens per key): degrade, flagged, and let the
		// key's refusal show in the key errors.
		qs.l.calls.keyError()
		return held, false
	}
	qs.awaitBaseLocked(ctx, m, q)
	call := q.call(m.key, ps, n, held)
	call.Want, call.Min = qs.want(m, ps, n, rateWant), m.cost
	call.NeedBase = qs.l.cfg.QuotaBases != nil && call.NeedBase
	rep, ok := qs.sendLocked(ctx, m, call)
	if !ok {
		return held, false
	}
	q.applyReply(ps, n, rep, m.cost, qs.l.now(), qs.l.cfg.LeaseTTL)
	if rep.Granted == 0 && call.NeedBase && q.holdsNoBase() {
		// A counter without a base (a new period or region, a store that
		// lost its state) granted nothing: read the base and ask again,
		// so that it is rebuilt from the ledger before it grants. The
		// returns and the charge went with the first call.
		// A request in flight may be for the periods before these (it
		// is then dropped): start one for these after it.
		for try := 0; try < 2 && q.awaitsBase(); try++ {
			qs.maybeRebaseLocked(m, q, qs.l.now(), rep, call.Want)
			qs.awaitBaseLocked(ctx, m, q)
		}
		// Without a base by now (the ledger is slow or away) the counter
		// grants on what it holds: a quota is not closed for want of a
		// base.
		retry := q.call(m.key, ps, n, 0) // the charge went with the first call
		retry.Want, retry.Min, retry.NeedBase = call.Want, call.Min, false
		if rep, ok = qs.sendLocked(ctx, m, retry); !ok {
			return 0, false
		}
		q.applyReply(ps, n, rep, m.cost, qs.l.now(), qs.l.cfg.LeaseTTL)
	}
	qs.maybeRebaseLocked(m, q, qs.l.now(), rep, call.Want)
	return rep.Granted, true
}

// call makes one quota counter call (storeCall), telling the breaker by v.
func (qs *quotas) call(ctx context.Context, call store.QuotaCall, v verdict) (store.QuotaReply, time.Duration, error) {
	qs.calls.Add(1)
	op := storeOp[store.QuotaReply]{span: "quota.store.quota", want: call.Want, verdict: v,
		granted: func(r store.QuotaReply) int64 { return r.Granted }}
	op = op.withDetail(attribute.Int64("quota.charge", call.Charge)).withDetail(attribute.Int("quota.periods", len(call.Periods)))
	return storeCall(ctx, &qs.l.calls, op, func(ctx context.Context) (store.QuotaReply, error) {
		return qs.store.LeaseQuota(ctx, call)
	})
}

// awaitBaseLocked waits, up to QuotaBaseTimeout, for the base request in
// flight of a key whose counters hold no base. The shard is unlocked
// meanwhile.
func (qs *quotas) awaitBaseLocked(ctx context.Context, m *miss, q *quotaState) {
	wait := q.baseInFlight()
	if wait == nil {
		return
	}
	m.e.busy = true
	m.sh.mu.Unlock()
	select {
	case <-wait:
	case <-time.After(qs.l.cfg.QuotaBaseTimeout):
	case <-ctx.Done():
	}
	m.sh.mu.Lock()
	m.e.busy = false
}

// sendLocked makes one quota call with the shard unlocked and
// reports whether the store answered.
func (qs *quotas) sendLocked(ctx context.Context, m *miss, call store.QuotaCall) (store.QuotaReply, bool) {
	m.e.busy = true
	m.sh.mu.Unlock()
	rep, _, err := qs.call(ctx, call, judgeAnswer)
	m.sh.mu.Lock()
	m.e.busy = false
	return rep, err == nil
}

// applyReply records a quota call's reply, for a check of cost at
// limiter time now, in the key's quota state: the periods, the counters'
// view, whether they hold a base, and whether a quota is spent (the key
// is then refused locally for ttl, LeaseTTL).
func (q *quotaState) applyReply(ps *[store.MaxQuotaPeriods]store.QuotaPeriod, n int, rep store.QuotaReply, cost, now int64, ttl time.Duration) {
	q.charge = 0
	q.syncAt = now
	q.bases = [store.MaxQuotaPeriods]*store.QuotaBaseIn{}
	q.n, q.periods = n, *ps
	for i := range n {
		q.periods[i].Return, q.periods[i].Base = 0, nil
	}
	q.degradedSet = false
	v := &quotaView{n: n}
	q.until, q.baseless = 0, false
	for i := range n {
		c := rep.Counters[i]
		v.q[i] = quotaViewPeriod{unit: ps[i].Unit, limit: ps[i].Limit, start: ps[i].Start, end: ps[i].End, left: c.Allowance - c.Used}
		if v.q[i].left < v.q[v.exhausted].left {
			v.exhausted = i
		}
		if c.BaseAt.IsZero() {
			q.baseless = true
		}
		if !c.BaseAt.Equal(q.baseAt[i]) {
			q.baseAt[i], q.usedAtBase[i] = c.BaseAt, c.Used-rep.Granted
		}
	}
	q.view = v
	if rep.Granted < cost && v.q[v.exhausted].left < cost {
		// Spent (not merely waiting for a base): refused locally until a
		// re-base or a refund may have opened room.
		q.until = now + int64(ttl)
	}
}

// maybeRebaseLocked starts a base request for the key's periods when its
// counters need one (docs/design.md [quotas]): they hold none; their
// oldest base is older than QuotaRebase; a counter's room is within two
// leases of its end; or the region added to a counter, since its base,
// more than QuotaAccuracy of the quota or two leases (what the other
// regions spent meanwhile is in no base this region holds: its share of it
// is what a stale base over-admits). At most one request per key is in
// flight, at most one a second, and a key whose requests fail waits
// longer each time (up to QuotaRebase).
func (qs *quotas) maybeRebaseLocked(m *miss, q *quotaState, now int64, rep store.QuotaReply, lease int64) {
	if qs.l.cfg.QuotaBases == nil || !q.rebaseDue(now, qs.l.storeNanos(now), rep, lease, qs.l.cfg.QuotaRebase, qs.l.cfg.QuotaAccuracy) {
		return
	}
	done, n, ps := q.startFetch(now)
	qs.fetches.Add(1)
	go qs.fetchBases(m.key, m.sh, q, n, ps, done)
}

// rebaseDue reports whether the key's counters need a base request at
// limiter time now (store time sn), after a quota call that answered rep
// for a lease of lease (maybeRebaseLocked says when), rebase and accuracy
// being QuotaRebase and QuotaAccuracy.
func (q *quotaState) rebaseDue(now, sn int64, rep store.QuotaReply, lease int64, rebase time.Duration, accuracy float64) bool {
	if q.fetching != nil {
		return false
	}
	due := q.baseless
	for i := 0; i < q.n && !due; i++ {
		c := rep.Counters[i]
		grew := c.Used - q.usedAtBase[i]
		due = time.Duration(sn-c.BaseAt.UnixNano()) > rebase ||
			q.view.q[i].left < 2*lease ||
			float64(grew) >= math.Max(accuracy*float64(q.periods[i].Limit), float64(2*lease))
	}
	gap := time.Second
	if q.fetchFails > 0 {
		gap = min(rebase, time.Second<<min(q.fetchFails, 6))
	}
	return due && (q.lastFetch == 0 || now-q.lastFetch >= int64(gap) || q.baseless && q.fetchFails == 0)
}

// call is the key's quota call for the periods ps[:n], returning held
// permits: it charges what was spent without a grant, sends the fetched
// bases of these periods, and asks for a base while requests for them
// succeed. The caller sets Want and Min.
func (q *quotaState) call(key string, ps *[store.MaxQuotaPeriods]store.QuotaPeriod, n int, held int64) store.QuotaCall {
	for i := range n {
		ps[i].Return = held
		ps[i].Base = q.bases[i]
		if q.bases[i] != nil && (q.n != n || !q.periods[i].Start.Equal(ps[i].Start)) {
			ps[i].Base = nil // fetched for another period
		}
	}
	return store.QuotaCall{Key: key, Periods: ps[:n], Charge: q.charge, NeedBase: q.fetchFails == 0}
}

// holdsNoBase reports whether a counter of the key held no base at its
// last quota call.
func (q *quotaState) holdsNoBase() bool { return q.baseless }

// awaitsBase reports whether the key's counters wait for a base that
// requests may still bring: none fetched, and the last did not fail.
func (q *quotaState) awaitsBase() bool { return q.bases[0] == nil && q.fetchFails == 0 }

// baseInFlight returns the channel that closes when the key's base
// request in flight ends, when its counters hold no base; nil otherwise.
func (q *quotaState) baseInFlight() chan struct{} {
	if !q.baseless {
		return nil
	}
	return q.fetching
}

// fetchBases reads the ledger's base of each of a key's periods and leaves
// them for the key's next quota call.
func (qs *quotas) fetchBases(key string, sh *shard, q *quotaState, n int, ps [store.MaxQuotaPeriods]store.QuotaPeriod, done chan struct{}) {
	defer qs.fetches.Done()
	ctx, cancel := context.WithTimeout(context.Background(), qs.l.cfg.QuotaBaseTimeout)
	defer cancel()
	var got [store.MaxQuotaPeriods]*store.QuotaBaseIn
	var err error
	for i := range n {
		var b QuotaBase
		if b, err = qs.l.cfg.QuotaBases.QuotaBase(ctx, key, ps[i].Start, ps[i].End); err != nil {
			break
		}
		got[i] = &store.QuotaBaseIn{Total: b.Total, Region: b.ByRegion[qs.l.cfg.Region], AsOf: b.AsOf}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q.endFetch(done, got, n, ps, err, sh.quotas[key] == q)
	qs.baseFetches.Add(1)
	if err != nil {
		qs.baseFailures.Add(1)
	}
}

// startFetch marks a base request for the key's periods ps[:n] in flight
// from limiter time now; endFetch closes the returned channel when it
// ends.
func (q *quotaState) startFetch(now int64) (done chan struct{}, n int, ps [store.MaxQuotaPeriods]store.QuotaPeriod) {
	done = make(chan struct{})
	q.fetching, q.lastFetch = done, now
	return done, q.n, q.periods
}

// endFetch ends the base request in flight (done): the bases got for the
// periods ps[:n] wait for the next quota call when the request succeeded
// and the key still has this state (current) on those periods.
func (q *quotaState) endFetch(done chan struct{}, got [store.MaxQuotaPeriods]*store.QuotaBaseIn, n int, ps [store.MaxQuotaPeriods]store.QuotaPeriod, err error, current bool) {
	q.fetching = nil
	close(done)
	if err != nil {
		q.fetchFails++
		return
	}
	q.fetchFails = 0
	if current && q.n == n && q.periods == ps {
		q.bases = got
	}
}

// startDegraded starts the key's degraded quota budget at left.
func (q *quotaState) startDegraded(left int64) {
	q.degradedLeft = left
	q.degradedSet, q.degradedSpent, q.spentAt = true, 0, [4]int64{}
}

// spendDegraded spends cost from the degraded budget when it fits, or
// whatever it holds when open (FailOpen), counting it as a charge for the
// counters; it reports whether it spent.
func (q *quotaState) spendDegraded(cost int64, open bool) bool {
	if !open && q.degradedLeft < cost {
		return false
	}
	q.degradedLeft -= cost
	q.degradedSpent += cost
	q.charge += cost
	return true
}

// sampleDegradedSpent records the degraded spend as a base request
// starts: the ledger lacks at least what was spent since (spentAt).
func (q *quotaState) sampleDegradedSpent() {
	copy(q.spentAt[1:], q.spentAt[:len(q.spentAt)-1])
	q.spentAt[0] = q.degradedSpent
}

// degradedRebaseLocked keeps a degraded key's quota budget on the ledger
// while its store is away (the ledger is not: its bases come over NATS):
// at most once a second it asks for the key's bases, and each new base
// caps what this process may still spend at its local share of the
// region's room by that base, share × (limit − base total), less what it
// spent that the base may not hold yet (its degraded spend since the
// request three before this one, about three seconds: a report's way to
// the ledger). Without it a long outage spends on the room and the share
// of the last call before it, while the other regions spend the same
// room.
func (qs *quotas) degradedRebaseLocked(m *miss, q *quotaState, local float64) {
	if qs.l.cfg.QuotaBases == nil {
		return
	}
	now := qs.l.now()
	q.rebaseDegraded(m.share, local)
	if !q.degradedFetchDue(now) {
		return
	}
	q.sampleDegradedSpent()
	done, n, ps := q.startFetch(now)
	qs.fetches.Add(1)
	go qs.fetchBases(m.key, m.sh, q, n, ps, done)
}

// degradedFetchDue reports whether a degraded key with periods asks for
// its bases at limiter time now: none is in flight, and none started in
// the last second.
func (q *quotaState) degradedFetchDue(now int64) bool {
	return q.n > 0 && q.fetching == nil && (q.lastFetch == 0 || now-q.lastFetch >= int64(time.Second))
}

// split puts the key's two leases back together: it returns the entry's
// permits, the lesser of the rate lease and the quota lease held, and
// keeps the surplus of the larger.
func (q *quotaState) split(rate, held int64) (permits int64) {
	s := min(rate, held)
	q.extraRate, q.extraQuota = rate-s, held-s
	return s
}

// rebaseDegraded caps the degraded budget by a base not yet applied: at
// local × share × (limit − base total), less the degraded spend the base
// may not hold yet.
func (q *quotaState) rebaseDegraded(share, local float64) {
	b := q.bases[0]
	if b == nil || b.AsOf.Equal(q.degradedBase) {
		return
	}
	q.degradedBase = b.AsOf
	unreported := q.degradedSpent - q.spentAt[len(q.spentAt)-1]
	room := int64(math.MaxInt64)
	for i := range q.n {
		if b := q.bases[i]; b != nil {
			room = min(room, int64(math.Floor(share*float64(q.periods[i].Limit-b.Total))))
		}
	}
	q.degradedLeft = min(q.degradedLeft, max(0, int64(local*float64(max(room, 0)))-unreported))
}
