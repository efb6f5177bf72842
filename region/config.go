package region

import (
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/field"
	"github.com/quotaplatform/quota/region/store"
)

// ShareSource says what fraction of a key's global limit this region holds,
// in (0, 1]. The gossip package provides one that follows cross-region
// demand. Called on the slow path only; after a key's share changes, call
// Limiter.Reshare(key) so that a key using its region's bucket re-takes its
// lease at the new size.
type ShareSource interface {
	Share(key string) float64
}

// ProcessCounter says how many limiter processes share this region's store
// (memberlist provides the live count). Lease caps and degraded floors are
// divided by it. Called on the slow path only.
type ProcessCounter interface {
	Processes() int
}

// Config configures a Limiter. Start from DefaultConfig; New validates a copy.
type Config struct {
	// Region names this process's region, for usage and logs. Default store.DefaultRegion ("local").
	Region string

	// StoreTimeout is the hard limit on one store call; slower calls count as
	// failures and the decision degrades. Default 5ms.
	StoreTimeout time.Duration

	// LeaseTTL is how long a lease may be spent. Unspent permits of an expired
	// lease go back to the store (on the key's next store call or the next
	// sweep), so an idle process hoards nothing for longer than this plus
	// SweepInterval. What one process may hoard is bounded by the lease cap
	// anyway (AccuracyBudget); the TTL trades store calls for keys with a
	// few decisions per second against how long permits sit idle. Default 5s.
	LeaseTTL time.Duration

	// AccuracyBudget is the fraction of AccuracyHorizon's worth of a key's
	// regional rate that the leases of all the region's processes may hold at
	// once: the cap on one lease is budget × rate × horizon × share /
	// processes. Default 0.01 (1 % of a minute's limit).
	AccuracyBudget float64
	// AccuracyHorizon: see AccuracyBudget. Default 60s.
	AccuracyHorizon time.Duration

	// ProcessEstimate is the number of processes sharing the region's store,
	// used when Processes is nil. Default 1.
	ProcessEstimate int
	// Processes, when set, gives the live process count (membership).
	Processes ProcessCounter

	// Shares, when set, gives the region's share of each key; nil means 1.
	Shares ShareSource

	// Costs, when set, gives endpoint weights for AllowEndpoint; an endpoint
	// it does not know costs DefaultCost. nil means every endpoint costs
	// DefaultCost.
	Costs CostResolver
	// DefaultCost is the cost of an endpoint with no weight. Default 1;
	// 0 makes unknown endpoints an error (ErrUnknownEndpoint).
	DefaultCost int64

	// MaxKeys caps the keys holding local state. Beyond it a key not used
	// recently is evicted (second-chance approximation of LRU): its unspent
	// lease goes back to the store and its usage is handed to the sink first.
	// The cap is enforced per shard with a tenth of headroom for uneven
	// hashing, so at most 1.1 × MaxKeys are tracked. Maps are sized for the
	// cap up front. Default 100,000.
	MaxKeys int

	// Window is the accounting window. Default store.DefaultWindow (60s).
	Window time.Duration
	// Usage receives usage deltas; nil discards them.
	Usage UsageSink
	// FlushInterval is how often Run hands usage to Usage: a ledger
	// reporter's FinalGrace (2s) must exceed it, and gossip hears demand
	// from it. Default 1s.
	FlushInterval time.Duration
	// SweepInterval is how often Run returns expired leases. Default 1s.
	SweepInterval time.Duration

	// MinLocalShare is the floor of this process's share of a key's regional
	// traffic in degraded mode: the local bucket is limit × region share ×
	// max(local share, floor). The floor is the larger of MinLocalShare
	// and FloorFraction / processes. Defaults 0.02 and 0.25.
	MinLocalShare float64
	// FloorFraction: see MinLocalShare.
	FloorFraction float64
	// DebtGrace is how long a bucket forgives degraded debt after the first
	// payment of an outage left refill over, or after the bucket was
	// created afresh (Store.Lease): long enough for every process of the
	// region to come back and pay. Default 5s.
	DebtGrace time.Duration
	// LocalShareHalfLife is the half-life of the demand sums (this
	// process's and the region's) the local share is learned from.
	// Default 30s.
	LocalShareHalfLife time.Duration
	// LocalSharePrior is a pseudo-demand, in cost units, added to the
	// region's sum and split evenly over its processes: a key with little
	// traffic gets about an even split instead of an estimate from a handful
	// of requests, which could size its degraded bucket below one request's
	// cost. Default 20.
	LocalSharePrior float64

	// BreakerThreshold is the number of consecutive store failures that open
	// the circuit breaker. An error about one key (store.ErrStoreRejected) is not
	// a failure: that key alone degrades. Default 3.
	BreakerThreshold int
	// BreakerCooldown is how long the breaker stays open before one probe
	// call may try the store. Default 250ms.
	BreakerCooldown time.Duration
	// ProbeTimeout bounds the first call of a background probe (Run, with
	// Config.Clock nil, probes an open breaker itself instead of waiting
	// for a miss to): long enough for the store client to dial again and
	// the store to load its script after a restart, none of which a
	// decision waits for. The probe's second call must still answer within
	// StoreTimeout for the breaker to close. A ProbeTimeout below
	// StoreTimeout counts as StoreTimeout. Default 1s.
	ProbeTimeout time.Duration

	// SlotTTL is how long a concurrency slot (Limiter.Acquire) lives
	// unless renewed or released: a holder that dies frees its slot this
	// long after its last Acquire. Default 30s.
	SlotTTL time.Duration

	// IdempotencyHorizon is how long the region's store remembers a
	// request id after its last use (Limiter.AllowRequest, Refund,
	// Charge): the same id within it is charged once. Default 24h
	// (docs/design.md [idempotency]).
	IdempotencyHorizon time.Duration

	// QuotaBases, when set, reads what the ledger holds of a key's spend
	// in a quota period (docs/design.md [quotas]): a region's quota
	// counters are re-based on it when they hold no base (a new period, a
	// new region, a store that lost its state), when a counter's room is
	// within two leases of its end, and otherwise once QuotaRebase has
	// passed. nil: a quota counts what the region's store holds alone.
	QuotaBases QuotaBases
	// QuotaRebase is the longest a key's quota counters go without a
	// fresh base while the key has traffic. Default 1m.
	QuotaRebase time.Duration
	// QuotaBaseTimeout bounds one base request; a quota call of a counter
	// that holds no base waits for the request that long at most, and
	// leases without a base when it fails. Default 250ms.
	QuotaBaseTimeout time.Duration
	// QuotaAccuracy is the fraction of a quota that the region's processes
	// may hold in quota leases together: a process's quota lease is at
	// most QuotaAccuracy × limit × share ÷ processes, or its rate lease
	// when that is more. Default 0.001.
	QuotaAccuracy float64

	// Clock is the time source for decisions and the tickers of Run. nil
	// (the default) means the system clock, read cheaply: while Run runs,
	// decisions read a coarse clock it advances every 500 µs, and otherwise
	// the monotonic clock alone (docs/design.md [store-clock]). A Clock of
	// the caller's own, clock.System() included, is read on every decision.
	Clock clock.Clock
	// ClockOffset is added to the wall clock readings the Limiter places
	// store time and accounting windows with, as if this host's wall clock
	// were off by that much: for clock-skew tests (the daemon's
	// --clock-skew). Lease expiry, staleness and the breaker are measured
	// as differences of the clock's readings, which the offset leaves
	// alone; the coarse clock is kept either way. Default 0.
	ClockOffset time.Duration

	// Observer, when set, is told of store calls and state changes, for
	// metrics. Its methods are called on the slow path only.
	Observer Observer

	// Tracer, when set, gets a span per store call ("quota.store.call": the
	// permits asked, granted and returned, the latency, the error), a child
	// of the span in the decision's context (the check request's, when the
	// daemon honours its traceparent). Only the slow path calls the store,
	// so a decision served from a lease costs nothing. No key is recorded.
	// Default nil: no spans.
	Tracer trace.Tracer
}

// Observer receives slow-path events for metrics. Methods must be cheap and
// safe for concurrent use.
type Observer interface {
	// StoreCall reports one store call, its latency, the permits asked and
	// granted, and its error (nil on success).
	StoreCall(latency time.Duration, want, granted int64, err error)
	// BreakerState reports the breaker's new state.
	BreakerState(s BreakerState)
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Region:             store.DefaultRegion,
		StoreTimeout:       5 * time.Millisecond,
		LeaseTTL:           5 * time.Second,
		AccuracyBudget:     0.01,
		AccuracyHorizon:    time.Minute,
		ProcessEstimate:    1,
		DefaultCost:        1,
		MaxKeys:            100_000,
		Window:             store.DefaultWindow,
		FlushInterval:      time.Second,
		SweepInterval:      time.Second,
		MinLocalShare:      0.02,
		FloorFraction:      0.25,
		DebtGrace:          5 * time.Second,
		LocalShareHalfLife: 30 * time.Second,
		LocalSharePrior:    20,
		BreakerThreshold:   3,
		BreakerCooldown:    250 * time.Millisecond,
		ProbeTimeout:       time.Second,
		SlotTTL:            30 * time.Second,
		IdempotencyHorizon: DefaultIdempotencyHorizon,
		QuotaRebase:        time.Minute,
		QuotaBaseTimeout:   250 * time.Millisecond,
		QuotaAccuracy:      0.001,
	}
}

// validate is Validate, for New.
func (c *Config) validate() error { return c.Validate() }

// Validate checks every field and reports every bad one, each a
// *field.Error naming it (internal/field); New validates a copy.
func (c Config) Validate() error {
	ch := field.Check{Prefix: "region: config "}
	check := ch.That
	check(c.Region != "", "Region", "must not be empty")
	check(c.StoreTimeout > 0, "StoreTimeout", "must be positive, got %v", c.StoreTimeout)
	check(c.LeaseTTL > 0, "LeaseTTL", "must be positive, got %v", c.LeaseTTL)
	check(c.AccuracyBudget > 0 && c.AccuracyBudget <= 1, "AccuracyBudget", "must be in (0, 1], got %v", c.AccuracyBudget)
	check(c.AccuracyHorizon > 0, "AccuracyHorizon", "must be positive, got %v", c.AccuracyHorizon)
	check(c.ProcessEstimate >= 1, "ProcessEstimate", "must be at least 1, got %d", c.ProcessEstimate)
	check(c.DefaultCost >= 0, "DefaultCost", "must not be negative, got %d", c.DefaultCost)
	check(c.MaxKeys >= 1, "MaxKeys", "must be at least 1, got %d", c.MaxKeys)
	check(c.Window > 0, "Window", "must be positive, got %v", c.Window)
	check(c.FlushInterval > 0, "FlushInterval", "must be positive, got %v", c.FlushInterval)
	check(c.SweepInterval > 0, "SweepInterval", "must be positive, got %v", c.SweepInterval)
	check(c.MinLocalShare > 0 && c.MinLocalShare <= 1, "MinLocalShare", "must be in (0, 1], got %v", c.MinLocalShare)
	check(c.FloorFraction >= 0 && c.FloorFraction <= 1, "FloorFraction", "must be in [0, 1], got %v", c.FloorFraction)
	check(c.DebtGrace >= 0, "DebtGrace", "must not be negative, got %v", c.DebtGrace)
	check(c.LocalShareHalfLife > 0, "LocalShareHalfLife", "must be positive, got %v", c.LocalShareHalfLife)
	check(c.LocalSharePrior >= 0 && !math.IsInf(c.LocalSharePrior, 0), "LocalSharePrior", "must be a finite number ≥ 0, got %v", c.LocalSharePrior)
	check(c.BreakerThreshold >= 1, "BreakerThreshold", "must be at least 1, got %d", c.BreakerThreshold)
	check(c.BreakerCooldown > 0, "BreakerCooldown", "must be positive, got %v", c.BreakerCooldown)
	check(c.ProbeTimeout > 0, "ProbeTimeout", "must be positive, got %v", c.ProbeTimeout)
	check(c.SlotTTL >= time.Millisecond, "SlotTTL", "must be at least 1ms, got %v", c.SlotTTL)
	check(c.IdempotencyHorizon >= time.Millisecond, "IdempotencyHorizon", "must be at least 1ms, got %v", c.IdempotencyHorizon)
	check(c.QuotaRebase > 0, "QuotaRebase", "must be positive, got %v", c.QuotaRebase)
	check(c.QuotaBaseTimeout > 0, "QuotaBaseTimeout", "must be positive, got %v", c.QuotaBaseTimeout)
	check(c.QuotaAccuracy > 0 && c.QuotaAccuracy <= 1, "QuotaAccuracy", "must be in (0, 1], got %v", c.QuotaAccuracy)
	return ch.Err()
}

// EndpointCost returns endpoint's weight: from Config.Costs, else
// Config.DefaultCost, else ErrUnknownEndpoint.
func (l *Limiter) EndpointCost(endpoint string) (int64, error) {
	if l.cfg.Costs != nil {
		if c, ok := l.cfg.Costs.Cost(endpoint); ok {
			return c, nil
		}
	}
	if l.cfg.DefaultCost == 0 {
		return 0, fmt.Errorf("%w: endpoint %q has no cost weight", ErrUnknownEndpoint, endpoint)
	}
	return l.cfg.DefaultCost, nil
}
