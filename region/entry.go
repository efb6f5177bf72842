package region

import (
	"math"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// entry is one key's local state. It is kept to 112 bytes (about 150 per
// tracked key, map slot and key included: BenchmarkStateBytes): times are
// limiter nanoseconds (see Limiter.now), regional bucket parameters are
// float32 because they only shape Reset and RetryAfter, the plan is a
// pointer to the copy its keys share, and the degraded bucket lives in its
// shard only while the store is unavailable. Usage deltas are 64-bit, so
// that any cost a plan admits (capacities go up to MaxCapacity) is counted
// exactly; they are flushed early if one would overflow. All fields are
// guarded by the shard's mutex.
type entry struct {
	permits   int64    // unspent permits of the current lease
	remaining int64    // regional tokens at the last sync (our lease included), less our spend since
	syncAt    int64    // limiter ns of the last successful store call; 0 = never; the lease expires LeaseTTL later
	windowEnd int64    // store-clock unix ns at which the current accounting window ends
	plan      *planRef // the key's plan, shared with its other keys; nil until the first miss

	rate       float32 // regional refill, cost units per second
	capacity   float32 // regional capacity
	shareMine  float32 // this process's demand, reported at its store calls, decayed
	shareAll   float32 // the region's demand over the same intervals, decayed
	lastDemand uint32  // low bits of the store's DemandTotal at the last sync
	demand     uint32  // cost asked for since the last store call that reported it (saturating)
	epoch      uint32  // Limiter.epoch when the plan fields were resolved
	nextLease  uint32  // AIMD lease size for the next store call

	spent, rejected, degraded int64 // usage deltas of the current window, ≥ 0
	leased                    int64 // net permits leased in the current window; may be negative

	leaseLive  bool // the lease may be spent until syncAt + LeaseTTL (false: ended early)
	inDegraded bool // the key has a degraded bucket in its shard (store unavailable)
	referenced bool // set on use, cleared by the eviction scan (second chance)
	busy       bool // a store call for this key is in flight: do not evict
	haveDemand bool // lastDemand is valid
	quota      bool // the key has quota state in its shard (shard.quotas): its plan has quotas
	// rejShadow: rejected holds would-reject cost, counted under a shadow
	// plan (refuseLocked). A refusal under a plan of the other kind hands
	// the deltas over first (shard.makeRoomLocked), so that one delta never
	// mixes the two.
	rejShadow bool
}

// setPlan gives the entry its plan, scaled by the region's share, as
// resolved at epoch. When the epoch or the plan's capacity changed, the
// lease was sized for other parameters: it ends now (its permits go back
// with the next store call), and setPlan reports true.
func (e *entry) setPlan(p *planRef, share float64, epoch uint32) (invalidated bool) {
	invalidated = e.plan == nil || e.epoch != epoch || e.limit() != p.limit
	if invalidated {
		e.leaseLive = false
	}
	e.epoch, e.plan = epoch, p
	e.rate, e.capacity = float32(p.Rate*share), float32(p.Capacity*share)
	e.referenced = true
	return invalidated
}

// limit is the plan's capacity (global), for Decision.Limit and the cost
// check.
func (e *entry) limit() int64 { return e.plan.limit }

// regionalAt estimates the regional tokens at limiter time now from the last
// sync: an upper bound, because other processes only take tokens away.
func (e *entry) regionalAt(now int64) float64 {
	est := float64(e.remaining) + float64(e.rate)*float64(now-e.syncAt)/1e9
	return math.Min(est, float64(e.capacity))
}

// refillTarget is how many regional tokens must be estimated before a miss
// goes back to the store: the cost, or half a lease when that is more, so
// that a key held at its limit fetches a useful lease per store call instead
// of one permit per call. Tokens left in the store meanwhile are not lost:
// they wait in the bucket for the next call.
func (e *entry) refillTarget(cost int64) float64 {
	return math.Min(math.Max(float64(cost), float64(e.nextLease/2)), float64(e.capacity))
}

func (e *entry) hasUsage() bool {
	return e.spent != 0 || e.leased != 0 || e.rejected != 0 || e.degraded != 0
}

// releaseLease empties an expired lease (or any lease, on Drain) for a
// sweep to give back, halving the next lease when it was mostly unspent.
func (e *entry) releaseLease() (permits int64) {
	e.shrinkIdleLease()
	permits, e.permits = e.permits, 0
	return permits
}

// applyGrant records a successful lease call at limiter time now: the new
// lease of rep.Granted permits (returned went back with the call), the
// region's tokens after it, the sync time, and the demand the call reported
// (sent), which it learns the local share from with the old sums decayed
// by halfLife.
func (e *entry) applyGrant(rep store.LeaseReply, returned, sent, now int64, halfLife time.Duration) {
	keep := 1.0
	if e.syncAt != 0 {
		keep = math.Exp2(-float64(now-e.syncAt) / float64(halfLife))
	}
	e.permits = rep.Granted
	e.leaseLive = true
	e.remaining = int64(rep.Tokens) + rep.Granted
	e.syncAt = now
	e.leased += rep.Granted - returned
	e.demand -= uint32(sent) // what was counted meanwhile waits for the next call
	e.observeDemand(sent, rep.DemandTotal, keep)
}

// localShare is this process's share of the key's regional traffic
// (docs/design.md [degraded-share]: the degraded limit is traffic-weighted),
// learned from demand while the store was healthy, or 1/processes before
// anything was learned. Demand, not grants: when a key is exhausted the
// store's spread rule evens out grants, which would pull every estimate
// toward an equal split. prior is Config.LocalSharePrior.
func (e *entry) localShare(processes int, prior float64) float64 {
	n := float64(processes)
	all := float64(e.shareAll) + prior
	if all <= 0 {
		return 1 / n
	}
	return math.Min(1, (float64(e.shareMine)+prior/n)/all)
}

// observeDemand learns the local share from one store reply: mine is the
// demand this process reported in the call, total the store's running count
// after it. The region's demand since this process's previous call is the
// difference of the two counts. Both sums decay by keep (the part of the
// half-life's weight left since the previous call) first.
func (e *entry) observeDemand(mine, total int64, keep float64) {
	t := uint32(total)
	if e.haveDemand {
		all := int64(int32(t - e.lastDemand)) // negative when the bucket restarted
		if all > 0 && mine >= 0 && mine <= all {
			e.shareMine = float32(float64(e.shareMine)*keep + float64(mine))
			e.shareAll = float32(float64(e.shareAll)*keep + float64(all))
		}
	}
	e.lastDemand, e.haveDemand = t, true
}
