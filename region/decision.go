package region

import "time"

// Decision is the answer to one Allow call. A rejection is a Decision with
// Allowed false, never an error. All counts are in cost units.
type Decision struct {
	// Allowed reports whether the check may go ahead: the cost was spent,
	// or the plan is a shadow plan (ShadowRejected says when it would
	// have been refused).
	Allowed bool
	// Degraded reports that the store was unavailable and the decision came
	// from the local degraded bucket (docs/design.md [degraded-share]). Such
	// decisions are also counted as degraded in usage.
	Degraded bool
	// Path is how the decision was made: for latency by path.
	Path Path
	// ShadowRejected reports that the key's plan is a shadow plan
	// (Plan.Shadow) that would have rejected this check: it was allowed
	// without spending, and counted in Usage.WouldReject.
	ShadowRejected bool
	// Replayed reports that the check carried a request id the region had
	// already decided (Limiter.AllowRequest): this is that first decision,
	// and nothing was charged now.
	Replayed bool
	// quotaOut: refused for a quota (QuotaRejected); quotaTight: 1 + the
	// index of the quota that gave Remaining, 0 for the bucket. With the
	// flags above they share one word: the fast path writes, and its
	// caller copies, every byte of a Decision.
	quotaOut   bool
	quotaTight int8

	// Remaining is the region's bucket as of the last store sync, less what
	// this process spent since (docs/design.md [remaining]). It is never just
	// the local lease. While degraded it is the local degraded bucket.
	Remaining int64
	// Limit is the plan's capacity (its burst), the most a key may spend at once.
	Limit int64
	// RetryAfter is how long until cost could be admitted: (cost − tokens) /
	// rate at the region's effective rate. Zero when Allowed, never zero when
	// not.
	RetryAfter time.Duration
	// Reset is how long until the region's bucket would be full again if the
	// key spent nothing more.
	Reset time.Duration
	// Stale is the age of the store sync that Remaining is based on.
	Stale time.Duration

	// quota is the key's quota counters at its last quota call and
	// quotaHeld the quota permits this process held at the decision:
	// Quotas.
	quota     *quotaView
	quotaHeld int64

	// plan is the plan the decision was taken against: a pointer to the copy
	// the key's entry shares, so that the fast path writes 8 bytes, not a
	// Plan. nil in a Decision the Limiter did not make.
	plan *planRef
}

// Plan returns the plan the decision was taken against, as the PlanResolver
// gave it when the key last went to the slow path (its Name included): what
// a response names as its policy, without resolving the key again. It is
// zero for a Decision the Limiter did not make.
func (d Decision) Plan() Plan {
	if d.plan == nil {
		return Plan{}
	}
	return d.plan.Plan
}

// FailurePolicy is the failure policy that decided d (Plan.Policy of its
// plan) when d is Degraded, and "" when the store decided or a lease
// did.
func (d Decision) FailurePolicy() FailurePolicy {
	if !d.Degraded || d.plan == nil {
		return ""
	}
	return d.plan.Policy()
}

// Path is how a decision was made.
type Path uint8

const (
	// PathFast: from the local lease, or rejected from the local estimate
	// of the region's bucket, without waiting for anything.
	PathFast Path = iota
	// PathSlow: on the slow path, after a store call or after waiting for
	// another decision's store call for the same key.
	PathSlow
	// PathDegraded: from the local degraded bucket (Degraded is set).
	PathDegraded
)

func (p Path) String() string {
	switch p {
	case PathFast:
		return "fast"
	case PathSlow:
		return "slow"
	case PathDegraded:
		return "degraded"
	}
	return "unknown"
}
