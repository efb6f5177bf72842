package limit

import "time"

// Usage is what one process did with one key in one accounting window since
// the previous Usage for that key and window: deltas, not totals. The sink
// adds them up; the region.Limiter hands each delta over exactly once.
type Usage struct {
	Key string
	// WindowStart is the start of the key's accounting window on the store's
	// clock. Windows are the limiter's Config.Window long and offset per key
	// by a hash of the key (region.WindowStart), so that keys do not all
	// roll at once. Every process computes the same windows for a key.
	WindowStart time.Time
	// Spent is the cost of allowed decisions, degraded ones included.
	Spent int64
	// Leased is the net permits taken from the store (grants less returns);
	// it can be negative when permits leased in an earlier delta came back.
	Leased int64
	// Rejected is the cost of rejected decisions.
	Rejected int64
	// Degraded is the cost allowed while the store was unavailable (a
	// part of Spent): by the degraded local bucket, or by a FailOpen plan.
	Degraded int64
	// WouldReject is the cost of the checks a shadow plan (Plan.Shadow)
	// would have rejected: they were allowed without spending, so they
	// are in neither Spent nor Rejected. What clients of a shadow plan
	// were allowed is Spent + WouldReject.
	WouldReject int64
	// Refunded is the cost given back by refunds (region.Limiter.Refund) in the
	// window: requests that failed upstream. What billing bills is
	// Spent + Charged − Refunded.
	Refunded int64
	// Charged is the cost taken by post-hoc charges (region.Limiter.Charge) in
	// the window: usage known only after a request was served, not part of
	// Spent.
	Charged int64
}

// UsageSink receives usage deltas. Record is called from the region.Limiter's
// background loop (Run) and from Flush, never on the decision path; it must
// not block for long and must not lose what it accepted. The batch is the
// Limiter's and is reused once Record returns: a sink that keeps deltas
// copies them.
type UsageSink interface {
	Record(batch []Usage)
}
