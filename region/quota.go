package region

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/store"
)

// A key whose plan has quotas (docs/design.md [quotas]) holds two leases
// in this process: rate permits from the region's bucket and quota
// permits from the region's quota counters. The entry's permits are what
// both allow, the lesser of the two, so that the fast path spends from
// one number as for any key; quotaState keeps the surplus of the larger
// lease, and the rest of the key's quota state, in its shard's quotas
// map, which only the slow path and keys with quotas touch.
type quotaState struct {
	n       int
	periods [store.MaxQuotaPeriods]store.QuotaPeriod // the periods the held quota permits were granted in
	// extraRate and extraQuota are the surplus of the rate lease and of
	// the quota lease over the entry's permits: one of them is zero.
	extraRate, extraQuota int64
	view                  *quotaView // the counters at the last quota call; nil before the first
	// until is the limiter time before which a check is rejected for the
	// key's quotas without a store call (exhausted is the quota that
	// refused it); 0: not exhausted.
	until     int64
	exhausted int
	// charge is cost spent without a quota grant (in degraded mode, or by
	// a check with a request id), added to the counters at the next call.
	charge int64
	// degradedLeft is what degraded decisions may still spend of the
	// quotas while the store is away; set when the key enters degraded
	// mode (degradedSet).
	degradedLeft int64
	degradedSet  bool
	// degradedSpent is what degraded decisions spent since degradedSet;
	// spentAt samples it when base requests start while degraded (the
	// ledger lacks at least what was spent since), and degradedBase is
	// the time of the last base that capped degradedLeft.
	degradedSpent int64
	spentAt       [4]int64
	degradedBase  time.Time
	// bases are fetched ledger bases not yet sent to the counters, by
	// period; fetching is closed when the base request in flight ends.
	bases      [store.MaxQuotaPeriods]*store.QuotaBaseIn
	baseless   bool // the counters held no base at the last call
	fetching   chan struct{}
	lastFetch  int64 // limiter ns the last base request started
	fetchFails int   // base requests failed in a row
	// baseAt and usedAtBase are, per period, the base the counter held at
	// the last call and the counter just after that base reached it: what
	// the region added since is the counter less usedAtBase.
	baseAt     [store.MaxQuotaPeriods]time.Time
	usedAtBase [store.MaxQuotaPeriods]int64
	// syncAt is the limiter time of the last quota call: the quota lease
	// outlives rate leases, and goes back QuotaRebase after it once the
	// key is idle.
	syncAt int64
}

// quotaView is a key's quota counters as its last quota call left them:
// immutable, shared by the decisions taken until the next call.
type quotaView struct {
	n int
	q [store.MaxQuotaPeriods]quotaViewPeriod
}

type quotaViewPeriod struct {
	unit  period.Unit
	limit int64
	start time.Time
	end   time.Time
	// left is what the region could still lease in the period after the
	// call: its allowance less its counter (this process's lease excluded).
	left int64
}

// QuotaStatus is one quota of a decision's plan, as this region sees it.
type QuotaStatus struct {
	Period     period.Unit
	Limit      int64     // the quota, the fleet's, in the period
	Remaining  int64     // what this region may still admit in the period (docs/design.md [quotas])
	Start, End time.Time // the period
}

// Quotas returns the quotas of d's plan as the key's last quota call saw
// them, less what this process spent since, shortest period first; nil
// when the plan has none or its counters were never read.
func (d Decision) Quotas() []QuotaStatus {
	v := d.quota
	if v == nil {
		return nil
	}
	out := make([]QuotaStatus, v.n)
	for i := range v.n {
		p := v.q[i]
		out[i] = QuotaStatus{Period: p.unit, Limit: p.limit, Remaining: max(0, p.left+d.quotaHeld), Start: p.start, End: p.end}
	}
	return out
}

// Tightest names the constraint that gave d's Remaining and Reset: the
// period of one of the plan's quotas, or "" for the token bucket.
func (d Decision) Tightest() period.Unit {
	if d.quotaTight == 0 || d.quota == nil {
		return ""
	}
	return d.quota.q[d.quotaTight-1].unit
}

// QuotaRejected reports that d was rejected (or, for a shadow plan, would
// have been) because a quota of its plan is spent: RetryAfter is then the
// end of that quota's period.
func (d Decision) QuotaRejected() bool { return d.quotaOut }

// currentPeriods fills ps with the periods of m's quotas at store time sn
// and returns how many there are.
func (l *Limiter) currentPeriods(m *miss, sn int64, ps *[store.MaxQuotaPeriods]store.QuotaPeriod) int {
	ref := m.e.plan
	at := time.Unix(0, sn)
	n := 0
	for _, q := range ref.QuotaList() {
		start, end := ref.cal.Bounds(q.Period, at)
		ps[n] = store.QuotaPeriod{Unit: q.Period, Start: start, End: end, Limit: q.Limit, Share: m.share}
		n++
	}
	return n
}

// quotaLockedState returns the key's quota state, creating it.
func quotaLockedState(sh *shard, key string, e *entry) *quotaState {
	q := sh.quotas[key]
	if q == nil {
		q = &quotaState{}
		if sh.quotas == nil {
			sh.quotas = make(map[string]*quotaState)
		}
		sh.quotas[key] = q
		e.quota = true
	}
	return q
}

// dropQuotaLocked forgets the key's quota state (its plan lost its
// quotas): the held quota permits go back with the next sweep.
func (l *Limiter) dropQuotaLocked(sh *shard, key string, e *entry) {
	q := sh.quotas[key]
	delete(sh.quotas, key)
	e.quota = false
	if q == nil {
		return
	}
	e.permits += q.extraRate
	if held := q.quotaLease(e); held > 0 && q.n > 0 {
		sh.returns = append(sh.returns, pendingReturn{key: key, quota: q.returnOf(held)})
	}
}

// quotaLease is the whole quota lease this process holds for the key: the
// entry's permits and the quota lease's surplus over them.
func (q *quotaState) quotaLease(e *entry) int64 { return e.permits + q.extraQuota }

// returnOf is a return of held quota permits to the counters they came
// from.
func (q *quotaState) returnOf(held int64) *quotaReturn {
	r := &quotaReturn{n: q.n, periods: q.periods}
	for i := range r.n {
		r.periods[i].Return = held
		r.periods[i].Base = nil
	}
	return r
}

// quotaReturn is quota permits on their way back to the counters of the
// periods they were granted in, with any cost to charge them.
type quotaReturn struct {
	n       int
	periods [store.MaxQuotaPeriods]store.QuotaPeriod // Return set
	charge  int64
}

// quotaOutLocked rejects a check locally while the key's quotas are spent
// (until the next quota call may find room: a re-base, a refund), and
// reports whether it did. The shard is locked.
func (l *Limiter) quotaOutLocked(sh *shard, key string, e *entry, now, cost int64, d *Decision) bool {
	q := sh.quotas[key]
	if q == nil || q.until == 0 || now >= q.until {
		return false
	}
	l.rejectLocked(sh, key, e, now, cost, d)
	return true
}

// quotaDecisionLocked adds the key's quotas to a decision: the tightest
// of the bucket and every quota gives Remaining and Reset, and a check
// refused for a quota waits until that quota's period ends.
func (l *Limiter) quotaDecisionLocked(sh *shard, key string, e *entry, now int64, d *Decision) {
	q := sh.quotas[key]
	if q == nil || q.view == nil {
		return
	}
	v := q.view
	d.quota, d.quotaHeld = v, q.quotaLease(e)
	sn := l.storeNanos(now)
	for i := range v.n {
		rem := max(0, v.q[i].left+d.quotaHeld)
		if rem < d.Remaining {
			d.Remaining = rem
			d.Reset = time.Duration(max(0, v.q[i].end.UnixNano()-sn))
			d.quotaTight = int8(i + 1)
		}
	}
	if q.until != 0 && now < q.until && (!d.Allowed || d.ShadowRejected) {
		d.quotaOut = true
		if d.ShadowRejected {
			return
		}
		d.RetryAfter = max(d.RetryAfter, time.Duration(v.q[q.exhausted].end.UnixNano()-sn), time.Millisecond)
	}
}

// quotaWant is the quota lease a process asks for: rateWant, or its part
// of QuotaAccuracy of the tightest quota when that is more (docs/design.md
// [quotas]: the bound).
func (l *Limiter) quotaWant(m *miss, ps *[store.MaxQuotaPeriods]store.QuotaPeriod, n int, rateWant int64) int64 {
	tightest := ps[0].Limit
	for i := 1; i < n; i++ {
		tightest = min(tightest, ps[i].Limit)
	}
	c := l.cfg.QuotaAccuracy * float64(tightest) * m.share / float64(m.procs)
	return max(m.cost, rateWant, int64(math.Min(c, store.MaxCount)))
}

// leaseQuotaLocked is leaseLocked for a key whose plan has quotas: it
// renews the rate lease when it is spent, expired or ended, and the
// quota lease when it is spent, its periods ended, or a base or a charge
// waits for the counters; then the entry's permits are the lesser of the
// two leases. The shard is unlocked for the calls.
func (l *Limiter) leaseQuotaLocked(ctx context.Context, m *miss, now int64, invalidated bool) Decision {
	e, sh := m.e, m.sh
	q := quotaLockedState(sh, m.key, e)
	var ps [store.MaxQuotaPeriods]store.QuotaPeriod
	n, held, rolled := l.quotaUnfoldLocked(m, q, now, &ps)
	rateLive := l.leaseLive(e, now)
	needRate := invalidated || !rateLive || e.permits < m.cost
	needQuota := rolled || held < m.cost || q.charge > 0 || q.bases[0] != nil || (q.until != 0 && now >= q.until)

	rateWant := m.cost
	if needRate {
		req := l.leaseRequestLocked(m, now, invalidated)
		rateWant = req.Want
		m.sh.mu.Unlock()
		rep, lat, err := l.callStore(ctx, req)
		m.sh.mu.Lock()
		e.busy = false
		now = l.now()
		switch l.applyLeaseReplyLocked(m, req, rep, lat, err, now) {
		case leaseUnavailable:
			q.split(e, held)
			return l.degradedLocked(m, now)
		case leaseRefused:
			q.split(e, held)
			return l.refusedCallLocked(m, now, req)
		}
	}
	if needQuota {
		var ok bool
		held, ok = l.quotaCallLocked(ctx, m, q, &ps, n, held, rateWant)
		now = l.now()
		if !ok {
			q.split(e, held)
			return l.degradedLocked(m, now)
		}
	}
	q.split(e, held)
	return l.decideFromPermitsLocked(sh, m, e, now)
}

// quotaUnfoldLocked takes the key's two leases apart for a store call:
// the entry's permits become the whole rate lease, and it returns the
// periods of the plan's quotas now, the quota lease held (none when the
// periods rolled since it was granted), and whether they rolled.
func (l *Limiter) quotaUnfoldLocked(m *miss, q *quotaState, now int64, ps *[store.MaxQuotaPeriods]store.QuotaPeriod) (n int, held int64, rolled bool) {
	e := m.e
	n = l.currentPeriods(m, l.storeNanos(now), ps)
	// A counter is a (unit, period start): a new limit on the same
	// periods keeps the counters and the lease held.
	rolled = n != q.n
	for i := 0; i < n && !rolled; i++ {
		rolled = ps[i].Unit != q.periods[i].Unit || !ps[i].Start.Equal(q.periods[i].Start)
	}
	held = q.quotaLease(e)
	e.permits += q.extraRate
	q.extraRate, q.extraQuota = 0, 0
	if rolled {
		// The permits held were granted in periods that ended (or by other
		// quotas): their counters keep them, which charges an ended period
		// (or a replaced quota) for permits nobody spent. That is harmless:
		// such a counter grants nothing more.
		held = 0
		q.until = 0
		q.baseless = false
	}
	return n, held, rolled
}

// requestQuota is what became of a check's cost taken from a key's quota
// lease (requestQuotaLocked).
type requestQuota uint8

const (
	quotaTaken       requestQuota = iota // taken from the quota lease
	quotaSpent                           // a quota cannot afford it
	quotaUnavailable                     // the store did not answer
)

// requestQuotaLocked takes a check's cost from the key's quota lease for
// a check with a request id (which is decided by its own store call, not
// from the rate lease), leasing quota first when the lease held cannot
// cover it. The caller gives the cost back (returnOf) when the check is
// then not charged. The shard is unlocked for a call.
func (l *Limiter) requestQuotaLocked(ctx context.Context, m *miss, now int64) (requestQuota, *quotaReturn) {
	e := m.e
	q := quotaLockedState(m.sh, m.key, e)
	var ps [store.MaxQuotaPeriods]store.QuotaPeriod
	n, held, rolled := l.quotaUnfoldLocked(m, q, now, &ps)
	if rolled || held < m.cost || q.charge > 0 || q.bases[0] != nil {
		var ok bool
		held, ok = l.quotaCallLocked(ctx, m, q, &ps, n, held, m.cost)
		if !ok {
			q.split(e, held)
			return quotaUnavailable, nil
		}
	}
	if held < m.cost {
		q.split(e, held)
		return quotaSpent, nil
	}
	q.split(e, held-m.cost)
	return quotaTaken, q.returnOf(m.cost)
}

// split makes the entry's permits the lesser of its rate lease (the
// entry's permits on entry) and the quota lease held, and keeps the
// surplus of the larger.
func (q *quotaState) split(e *entry, held int64) {
	s := min(e.permits, held)
	q.extraRate, q.extraQuota = e.permits-s, held-s
	e.permits = s
}

// release empties the key's leases for a return: the rate permits (the
// entry's permits, already taken as permits, and the rate surplus) and a
// return of the quota lease and any pending charge to the counters.
func (q *quotaState) release(permits int64) (rate int64, qr *quotaReturn) {
	rate = permits + q.extraRate
	held := permits + q.extraQuota
	q.extraRate, q.extraQuota = 0, 0
	if q.n == 0 || (held <= 0 && q.charge <= 0) {
		return rate, nil
	}
	qr = q.returnOf(held)
	qr.charge, q.charge = q.charge, 0
	return rate, qr
}

// quotaCallLocked makes the key's quota call: it returns the held quota
// permits, charges what was spent without a grant, sends any fetched
// base, and leases anew. A counter without a base waits for the base
// request in flight first. It returns the quota lease held after the
// call (the old one when the store did not answer), and whether the
// store answered.
func (l *Limiter) quotaCallLocked(ctx context.Context, m *miss, q *quotaState, ps *[store.MaxQuotaPeriods]store.QuotaPeriod, n int, held, rateWant int64) (int64, bool) {
	qs, ok := l.store.(store.QuotaStore)
	if !ok {
		// New refuses a plan with quotas on such a store (Validate of the
		// resolver's plans happens per key): degrade, flagged, and let the
		// key's refusal show in the key errors.
		l.keyErrors.Add(1)
		return held, false
	}
	l.awaitBaseLocked(ctx, m, q)
	call := store.QuotaCall{Key: m.key, Periods: ps[:n], Want: l.quotaWant(m, ps, n, rateWant), Min: m.cost, Charge: q.charge,
		NeedBase: l.cfg.QuotaBases != nil && q.fetchFails == 0}
	for i := range n {
		ps[i].Return = held
		ps[i].Base = q.bases[i]
		if q.bases[i] != nil && (q.n != n || !q.periods[i].Start.Equal(ps[i].Start)) {
			ps[i].Base = nil // fetched for another period
		}
	}
	rep, ok := l.sendQuotaCallLocked(ctx, m, qs, call)
	if !ok {
		return held, false
	}
	l.applyQuotaReplyLocked(m, q, ps, n, rep)
	if rep.Granted == 0 && call.NeedBase && q.baseless {
		// A counter without a base (a new period or region, a store that
		// lost its state) granted nothing: read the base and ask again,
		// so that it is rebuilt from the ledger before it grants. The
		// returns and the charge went with the first call.
		// A request in flight may be for the periods before these (it
		// is then dropped): start one for these after it.
		for try := 0; try < 2 && q.bases[0] == nil && q.fetchFails == 0; try++ {
			l.maybeRebaseLocked(m, q, l.now(), rep, call.Want)
			l.awaitBaseLocked(ctx, m, q)
		}
		// Without a base by now (the ledger is slow or away) the counter
		// grants on what it holds: a quota is not closed for want of a
		// base.
		call.Charge, call.NeedBase = 0, false
		for i := range n {
			ps[i].Return, ps[i].Base = 0, q.bases[i]
		}
		if rep, ok = l.sendQuotaCallLocked(ctx, m, qs, call); !ok {
			return 0, false
		}
		l.applyQuotaReplyLocked(m, q, ps, n, rep)
	}
	l.maybeRebaseLocked(m, q, l.now(), rep, call.Want)
	return rep.Granted, true
}

// awaitBaseLocked waits, up to QuotaBaseTimeout, for the base request in
// flight of a key whose counters hold no base. The shard is unlocked
// meanwhile.
func (l *Limiter) awaitBaseLocked(ctx context.Context, m *miss, q *quotaState) {
	if !q.baseless || q.fetching == nil {
		return
	}
	wait := q.fetching
	m.e.busy = true
	m.sh.mu.Unlock()
	select {
	case <-wait:
	case <-time.After(l.cfg.QuotaBaseTimeout):
	case <-ctx.Done():
	}
	m.sh.mu.Lock()
	m.e.busy = false
}

// sendQuotaCallLocked makes one quota call with the shard unlocked and
// tells the breaker how it went; it reports whether the store answered.
func (l *Limiter) sendQuotaCallLocked(ctx context.Context, m *miss, qs store.QuotaStore, call store.QuotaCall) (store.QuotaReply, bool) {
	m.e.busy = true
	m.sh.mu.Unlock()
	rep, lat, err := l.callQuota(ctx, qs, call)
	m.sh.mu.Lock()
	m.e.busy = false
	now := l.now()
	if err != nil {
		if store.IsTransient(err) {
			l.breaker.failure(now)
		} else {
			l.keyErrors.Add(1)
		}
		return store.QuotaReply{}, false
	}
	if lat > l.cfg.StoreTimeout {
		l.breaker.failure(now)
	} else {
		l.breaker.success()
	}
	return rep, true
}

// applyQuotaReplyLocked records a quota call's reply in the key's quota
// state: the periods, the counters' view, whether they hold a base, and
// whether a quota is spent (the key is then refused locally until
// LeaseTTL has passed).
func (l *Limiter) applyQuotaReplyLocked(m *miss, q *quotaState, ps *[store.MaxQuotaPeriods]store.QuotaPeriod, n int, rep store.QuotaReply) {
	now := l.now()
	q.charge = 0
	q.syncAt = now
	q.bases = [store.MaxQuotaPeriods]*store.QuotaBaseIn{}
	q.n, q.periods = n, *ps
	for i := range n {
		q.periods[i].Return, q.periods[i].Base = 0, nil
	}
	q.degradedSet = false
	v := &quotaView{n: n}
	q.until, q.baseless, q.exhausted = 0, false, 0
	for i := range n {
		c := rep.Counters[i]
		v.q[i] = quotaViewPeriod{unit: ps[i].Unit, limit: ps[i].Limit, start: ps[i].Start, end: ps[i].End, left: c.Allowance - c.Used}
		if v.q[i].left < v.q[q.exhausted].left {
			q.exhausted = i
		}
		if c.BaseAt.IsZero() {
			q.baseless = true
		}
		if !c.BaseAt.Equal(q.baseAt[i]) {
			q.baseAt[i], q.usedAtBase[i] = c.BaseAt, c.Used-rep.Granted
		}
	}
	q.view = v
	if rep.Granted < m.cost && v.q[q.exhausted].left < m.cost {
		// Spent (not merely waiting for a base): refused locally until a
		// re-base or a refund may have opened room.
		q.until = now + int64(l.cfg.LeaseTTL)
	}
}

// callQuota makes one quota call under the hard timeout.
func (l *Limiter) callQuota(ctx context.Context, qs store.QuotaStore, call store.QuotaCall) (store.QuotaReply, time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
	t0 := l.clock.Now()
	rep, err := qs.LeaseQuota(cctx, call)
	lat := l.clock.Now().Sub(t0)
	cancel()
	l.storeCalls.Add(1)
	l.quotaCalls.Add(1)
	if l.cfg.Observer != nil {
		l.cfg.Observer.StoreCall(lat, call.Want, rep.Granted, err)
	}
	if err == nil && (rep.Granted < 0 || rep.Granted > call.Want) {
		err = fmt.Errorf("%w: quota store granted %d of %d asked", store.ErrStoreUnavailable, rep.Granted, call.Want)
	}
	return rep, lat, err
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
func (l *Limiter) maybeRebaseLocked(m *miss, q *quotaState, now int64, rep store.QuotaReply, lease int64) {
	bases := l.cfg.QuotaBases
	if bases == nil || q.fetching != nil {
		return
	}
	due := q.baseless
	sn := l.storeNanos(now)
	for i := 0; i < q.n && !due; i++ {
		c := rep.Counters[i]
		grew := c.Used - q.usedAtBase[i]
		due = time.Duration(sn-c.BaseAt.UnixNano()) > l.cfg.QuotaRebase ||
			q.view.q[i].left < 2*lease ||
			float64(grew) >= math.Max(l.cfg.QuotaAccuracy*float64(q.periods[i].Limit), float64(2*lease))
	}
	gap := time.Second
	if q.fetchFails > 0 {
		gap = min(l.cfg.QuotaRebase, time.Second<<min(q.fetchFails, 6))
	}
	if !due || (q.lastFetch != 0 && now-q.lastFetch < int64(gap) && !(q.baseless && q.fetchFails == 0)) {
		return
	}
	done := make(chan struct{})
	q.fetching, q.lastFetch = done, now
	n, ps := q.n, q.periods
	l.fetches.Add(1)
	go l.fetchBases(m.key, m.sh, q, n, ps, done)
}

// fetchBases reads the ledger's base of each of a key's periods and leaves
// them for the key's next quota call.
func (l *Limiter) fetchBases(key string, sh *shard, q *quotaState, n int, ps [store.MaxQuotaPeriods]store.QuotaPeriod, done chan struct{}) {
	defer l.fetches.Done()
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.QuotaBaseTimeout)
	defer cancel()
	var got [store.MaxQuotaPeriods]*store.QuotaBaseIn
	var err error
	for i := range n {
		var b QuotaBase
		if b, err = l.cfg.QuotaBases.QuotaBase(ctx, key, ps[i].Start, ps[i].End); err != nil {
			break
		}
		got[i] = &store.QuotaBaseIn{Total: b.Total, Region: b.ByRegion[l.cfg.Region], AsOf: b.AsOf}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q.fetching = nil
	close(done)
	l.baseFetches.Add(1)
	if err != nil {
		q.fetchFails++
		l.baseFailures.Add(1)
		return
	}
	q.fetchFails = 0
	if sh.quotas[key] == q && q.n == n && q.periods == ps {
		q.bases = got
	}
}

// degradedQuotaLocked decides a degraded check's quotas: what a degraded
// decision may spend of them is the quota lease this process held, plus
// its local share of what the region could still lease at the last call
// (its whole quota lease's worth when it never made one), so that the
// region's processes together stay within the region's allowance. It
// reports whether cost fits, and counts it as spent without a grant, to
// be charged to the counters after recovery.
func (l *Limiter) degradedQuotaLocked(m *miss, local float64, open bool) bool {
	q := m.sh.quotas[m.key]
	if q == nil {
		return true
	}
	if !q.degradedSet {
		left := int64(math.MaxInt64)
		if q.view != nil {
			for i := range q.view.n {
				left = min(left, q.view.q[i].left)
			}
			left = int64(float64(max(left, 0)) * local)
		} else {
			var ps [store.MaxQuotaPeriods]store.QuotaPeriod
			n := l.currentPeriods(m, l.storeNanos(l.now()), &ps)
			left = l.quotaWant(m, &ps, n, m.cost)
		}
		q.degradedLeft = q.quotaLease(m.e) + left
		q.degradedSet, q.degradedSpent, q.spentAt = true, 0, [4]int64{}
	}
	l.degradedRebaseLocked(m, q, local)
	if !open && q.degradedLeft < m.cost {
		return false
	}
	q.degradedLeft -= m.cost
	q.degradedSpent += m.cost
	q.charge += m.cost
	return true
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
func (l *Limiter) degradedRebaseLocked(m *miss, q *quotaState, local float64) {
	if l.cfg.QuotaBases == nil || q.n == 0 {
		return
	}
	now := l.now()
	if b := q.bases[0]; b != nil && !b.AsOf.Equal(q.degradedBase) {
		q.degradedBase = b.AsOf
		unreported := q.degradedSpent - q.spentAt[len(q.spentAt)-1]
		room := int64(math.MaxInt64)
		for i := range q.n {
			if b := q.bases[i]; b != nil {
				room = min(room, int64(math.Floor(m.share*float64(q.periods[i].Limit-b.Total))))
			}
		}
		q.degradedLeft = min(q.degradedLeft, max(0, int64(local*float64(max(room, 0)))-unreported))
	}
	if q.fetching != nil || (q.lastFetch != 0 && now-q.lastFetch < int64(time.Second)) {
		return
	}
	copy(q.spentAt[1:], q.spentAt[:len(q.spentAt)-1])
	q.spentAt[0] = q.degradedSpent
	done := make(chan struct{})
	q.fetching, q.lastFetch = done, now
	l.fetches.Add(1)
	go l.fetchBases(m.key, m.sh, q, q.n, q.periods, done)
}

// sendQuotaReturn gives r's quota permits back to the counters they came
// from and charges its cost, in one quota call that leases nothing. Once
// sent, r carries no quota part: a retry of r (the rate part failed
// after) does not send it twice.
func (l *Limiter) sendQuotaReturn(ctx context.Context, r pendingReturn) returnOutcome {
	if r.quota == nil {
		return returnSent
	}
	qs, ok := l.store.(store.QuotaStore)
	if !ok {
		return returnRefused
	}
	call := store.QuotaCall{Key: r.key, Periods: r.quota.periods[:r.quota.n], Charge: r.quota.charge}
	_, _, err := l.callQuota(ctx, qs, call)
	if store.IsTransient(err) {
		l.breaker.failure(l.now())
		return returnFailed
	}
	l.breaker.success()
	if err != nil {
		return returnRefused
	}
	return returnSent
}

// quotaAdjustment is a refund's or a post-hoc charge's change to the
// key's quota counters of the current periods, for the next sweep to
// send: a refund returns cost, a charge adds it.
func (l *Limiter) quotaAdjustment(key string, plan Plan, share float64, op store.RequestOp, cost, now int64) pendingReturn {
	cal, _ := plan.Calendar() // validated by the caller
	at := time.Unix(0, l.storeNanos(now))
	qr := &quotaReturn{}
	for _, q := range plan.QuotaList() {
		start, end := cal.Bounds(q.Period, at)
		p := store.QuotaPeriod{Unit: q.Period, Start: start, End: end, Limit: q.Limit, Share: share}
		if op == store.RequestRefund {
			p.Return = cost
		}
		qr.periods[qr.n] = p
		qr.n++
	}
	if op != store.RequestRefund {
		qr.charge = cost
	}
	return pendingReturn{key: key, quota: qr}
}

// collectQuotaLocked is collectReturns for a key with quotas: an expired
// rate lease goes back as any other, but the quota lease stays for
// QuotaRebase after its call (renewing it with every rate lease would
// double the key's store calls), then goes back once the key is idle,
// or at once on Drain (all). A charge goes whenever the store is back.
// It reports whether there is anything to send.
func (l *Limiter) collectQuotaLocked(key string, e *entry, q *quotaState, debt, now int64, all, live, chargeDebts bool) (pendingReturn, bool) {
	r := pendingReturn{key: key, debt: debt, rate: float64(e.rate), capacity: float64(e.capacity)}
	expired := all || !live
	if expired && (e.permits > 0 || q.extraRate > 0) {
		released := e.releaseLease()
		r.permits = released + q.extraRate
		q.extraRate = 0
		q.extraQuota += released
	}
	switch {
	case q.n == 0:
	case expired && (q.extraQuota > 0 || q.charge > 0) && (all || now-q.syncAt >= int64(l.cfg.QuotaRebase)):
		r.quota = q.returnOf(q.extraQuota)
		r.quota.charge = q.charge
		q.extraQuota, q.charge = 0, 0
		q.degradedSet = false
	case q.charge > 0 && chargeDebts:
		// The store is back: what degraded decisions spent goes to the
		// counters, and the next outage starts a new degraded budget.
		r.quota = &quotaReturn{n: q.n, periods: q.periods, charge: q.charge}
		q.charge = 0
		q.degradedSet = false
	}
	return r, r.permits > 0 || r.debt > 0 || r.quota != nil
}

// degradedQuotaViewLocked adds the key's quotas to a degraded decision:
// the counters as the last quota call saw them, less this process's
// degraded spend since, so that a degraded answer lists its quotas and
// says which one refused it like any other.
func (l *Limiter) degradedQuotaViewLocked(m *miss, d *Decision) {
	q := m.sh.quotas[m.key]
	if q == nil || q.view == nil {
		return
	}
	d.quota = q.view
	d.quotaHeld = q.quotaLease(m.e)
	if q.degradedSet {
		// What this process may still spend of the quotas while degraded,
		// as a holding on top of the region's room at the last call:
		// Quotas then shows the tightest room less the degraded spend.
		tight := q.view.q[0].left
		for i := 1; i < q.view.n; i++ {
			tight = min(tight, q.view.q[i].left)
		}
		d.quotaHeld = q.degradedLeft - max(tight, 0)
	}
	sn := l.storeNanos(l.now())
	for i := range q.view.n {
		if rem := max(0, q.view.q[i].left+d.quotaHeld); rem < d.Remaining {
			d.Remaining = rem
			d.Reset = time.Duration(max(0, q.view.q[i].end.UnixNano()-sn))
			d.quotaTight = int8(i + 1)
		}
	}
}
