package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/field"
)

// Config configures a Node. Start from DefaultConfig; New validates a copy.
type Config struct {
	// Region is this process's region (flag --region). Required; a NATS
	// subject token (printable ASCII without '.', '*', '>').
	Region string
	// Process identifies this process within its region (flag
	// --process-id). Required; a NATS subject token.
	Process string

	// Regions names every region that shares limits with this one, this
	// one included (flag --regions, or the keys of --region-weights).
	// Required. Shares are split over exactly these regions (less those
	// that left: see Forget): a configured region never heard from holds
	// its floor once the warm-up is over, and a digest from a region not
	// named here is rejected (quota_gossip_rejected_digests_total
	// {reason="unknown_region"}), so it neither takes a share nor freezes
	// shares.
	Regions []string

	// Interval is the gossip period (flag --gossip-interval). Ticks fall on
	// multiples of it on the clock, so processes tick together. Default 1s.
	Interval time.Duration
	// Weights are the configured historical region weights (flag
	// --region-weights), for a cold start; they need not sum to 1. Either
	// empty (equal weights) or one weight for every region in Regions.
	Weights map[string]float64
	// Floor is each region's smallest share of a key (flag --share-floor),
	// in (0, 0.5]. With n regions and n × Floor > 1, each gets 1/n.
	// Default 0.05.
	Floor float64
	// Prior is the pseudo-demand, in cost units per second, spread over
	// regions by historical weight and added to every key's demand
	// (partition.Params.Prior): keys with much less demand than this follow
	// the historical weights. Default 1.
	Prior float64

	// HalfLife is the half-life of the per-key demand EWMA. Default
	// 3 × Interval.
	HalfLife time.Duration
	// TrustRamp is how long a new key, and a new process, take to be
	// trusted. A key's shares move from the historical weights to its
	// demand split linearly over this time, because a new key's first
	// samples are noise; a process's claims count linearly more over its
	// first TrustRamp, and until then it never freezes shares by going
	// silent. Both are counted by the receiver: a process's trust is the
	// number of ticks this node has had a new digest of it, and a key's
	// age is at most that (a digest's self-reported age cannot skip the
	// ramp). Only for processes already publishing when this node starts
	// does it add the age their first digest reports: it cannot know how
	// long they have been up. Default (when zero) 2 × HalfLife; one
	// Interval trusts demand at once.
	TrustRamp time.Duration
	// Hysteresis is the relative change of a key's smoothed demand needed
	// before the new value is published. Default 0.1 (10 %).
	Hysteresis float64
	// WeightHalfLife is the half-life of the total-demand average from which
	// region weights are learned. Default 10m.
	WeightHalfLife time.Duration
	// WeightPrior is how much learned total demand, in cost units per
	// second, counts as much as the configured Weights. Default 100.
	WeightPrior float64
	// WeightBand bounds the learned weights: each region's ends within
	// [w/WeightBand, w·WeightBand] of its configured weight w (equal
	// without Weights; partition.Band). Learned totals are self-reported,
	// so one absurd total would otherwise take every region's default
	// share of keys without digests. At least 1 (1 ignores learning);
	// default 2.
	WeightBand float64

	// TopK caps the keys per digest. Default 1024.
	TopK int

	// Rate, when set, returns a key's global rate in cost units per second
	// (its plan's Rate), or 0 when the key has no plan: it bounds what a
	// region may claim for the key (MaxClaim). Called from Run's goroutine
	// for every key with digests at every tick: it must be cheap and must
	// not block (pass a lookup of the plan catalogue). nil leaves claims
	// unbounded (only the trust ramp holds them back).
	Rate func(key string) float64
	// MaxClaim caps a region's claimed demand and admitted cost for a key
	// at MaxClaim × the key's Rate, summed over the region's processes
	// (partition.Params.MaxDemand): a region that claims more, honest or
	// forged, counts as claiming that much, so no claim pins another
	// region at its floor (a region with demand d keeps about
	// d / (regions × MaxClaim × rate) of the limit). Demand beyond the
	// limit is overload anyway. Default 2.
	MaxClaim float64
	// StrictOwnView makes a node count each process of its own region by
	// the least of its last two digests (ownViewLocked), so that digests a
	// sender times to reach its own region just before a tick and the
	// others just after cannot lift the regions' own shares above 1 for
	// that tick (1.30 of the limit without it: go test -run
	// TestStraddledDigests -v ./gossip/). The price is paid at all times:
	// demand is noisy from tick to tick, and the least of two ticks
	// under-counts a region's own processes, so the regions' shares sum
	// below 1: the harness's cold start (QUOTA_MULTIREGION=short go test
	// -run 'TestScenarios/cold-start$' -v ./test/multiregion/) admitted
	// 0.945-0.949 of its bound with it set in DefaultConfig, 0.970-0.977
	// without, against a floor of 0.97.
	// Default false: the timing attack needs one region's credentials and
	// arrivals placed within the tick, lasts a tick per digest, and is
	// bounded by MaxClaim.
	StrictOwnView bool
	// MaxProcesses caps the processes kept per region. A digest of a new
	// process of a region that already has this many takes the slot of the
	// process heard least recently if that one missed the last epoch
	// (quota_gossip_evicted_processes_total), and is refused otherwise
	// (quota_gossip_rejected_digests_total{reason="too_many_processes"});
	// either way the region is crowded for a while, and a crowded region
	// other than this one counts as claiming its maximum (see MaxClaim),
	// since its refused processes' claims are unknown here. A region that
	// runs more processes than this stays crowded: raise it. A process is
	// forgotten StaleAfter intervals after its last digest. Default 128.
	MaxProcesses int
	// MaxKeys caps the keys kept of one received digest: keys beyond it
	// (digests list the most demand first) are ignored
	// (quota_gossip_dropped_keys_total{reason="process_cap"}). At least
	// 1; default 1024 (TopK's default).
	MaxKeys int
	// MaxRegionKeys caps the distinct keys of one region that a tick
	// shares: beyond it, the region's processes take turns giving their
	// next hottest key, so that each keeps its hottest keys however many
	// keys others claim, and every node leaves out the same ones
	// (quota_gossip_dropped_keys_total{reason="region_cap"}, counted per
	// tick). Each tick shares every kept key of every region, so this bounds
	// its work. Raise it for a fleet whose load balancer shards keys over
	// processes (their top keys are then disjoint: TopK × processes). At
	// least MaxKeys; default 16384.
	MaxRegionKeys int
	// MaxDigestBytes caps one digest's size, at most MaxDigestSize.
	// Default 60 KiB.
	MaxDigestBytes int
	// StaleAfter is how many intervals without a digest make a process
	// stale. Default 3.
	StaleAfter int
	// WarmUp is how many intervals, at most, a new Node waits to compute
	// from a digest of every region in Regions. Until it has one from each
	// (or WarmUp intervals have passed), every key gets the default shares:
	// the configured Weights split over all of Regions (equal without
	// Weights), never the whole limit for want of news from the others.
	// The first interval always only listens. At least 1; default 5.
	WarmUp int
	// ChangeThreshold is how much (absolute, as a fraction of the limit)
	// this region's share of a key must move for OnChange to be called.
	// Default 0.01.
	ChangeThreshold float64
	// Subject is the subject prefix; digests go to
	// <Subject>.<region>.<process>. Default "quota.gossip".
	Subject string

	// OnChange, when set, is called with a key whose share for this region
	// moved by ChangeThreshold or more (pass region.Limiter.Reshare).
	// OnChangeAll, when set, is called when the default share of keys
	// without digests moved (pass region.Limiter.InvalidateAll). Both are
	// called from Run's goroutine and must not block.
	OnChange    func(key string)
	OnChangeAll func()

	// Flush, when set, is called at the start of every tick, before the
	// digest is built, so that the usage of the interval just ended is in it
	// whatever the limiter's FlushInterval (pass region.Limiter.Flush).
	// Without it, usage reaches the digest up to one FlushInterval late, and
	// processes whose flushes fall on different sides of a tick publish a
	// new key's demand a tick apart. Called from Run's goroutine.
	Flush func()

	// Clock is the time source: ticks fall on its interval boundaries
	// (a timer from Clock.NewTimer), and digest ages and gossip ages are
	// read from it. nil means clock.System(); tests pass a clock.Manual and
	// advance it to make Run tick.
	Clock clock.Clock
	// Logger receives warnings (bad digests, at most one line a minute
	// with their count and never a key; publish errors); nil discards.
	Logger *slog.Logger
	// Registerer, when set, gets the gossip metrics
	// (quota_gossip_age_seconds{region}, quota_gossip_frozen,
	// quota_gossip_keys, quota_gossip_digest_bytes,
	// quota_gossip_bad_digests_total,
	// quota_gossip_rejected_digests_total{reason},
	// quota_gossip_dropped_keys_total{reason},
	// quota_gossip_evicted_processes_total,
	// quota_gossip_share_changes_total).
	Registerer prometheus.Registerer
	// HotKeyMetrics is how many of the fleet's hottest keys (HotKeys) the
	// Registerer also gets, by rank: quota_hotkey_demand_share{rank},
	// quota_hotkey_admitted_rate{rank} and quota_hotkey_region_share{rank}
	// (this region's share of the key's limit), at most this many series
	// each whatever the number of keys, and no key in a label. Default 0
	// (none).
	HotKeyMetrics int
}

// DefaultConfig returns the documented defaults. Region, Process and
// Regions must still be set.
func DefaultConfig() Config {
	return Config{
		Interval:        time.Second,
		Floor:           0.05,
		Prior:           1,
		Hysteresis:      0.1,
		WeightHalfLife:  10 * time.Minute,
		WeightPrior:     100,
		WeightBand:      2,
		TopK:            1024,
		MaxClaim:        2,
		MaxProcesses:    128,
		MaxKeys:         1024,
		MaxRegionKeys:   16384,
		MaxDigestBytes:  60 << 10,
		StaleAfter:      3,
		WarmUp:          5,
		ChangeThreshold: 0.01,
		Subject:         "quota.gossip",
	}
}

// Validate checks every field and reports every bad one, those a check
// of its own finds as a *field.Error naming it (internal/field); New
// validates a copy.
func (c Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, path, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("gossip: config %w", field.Errorf(path, format, args...)))
		}
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if err := checkName("Region", c.Region); err != nil {
		errs = append(errs, fmt.Errorf("gossip: config Region: %w", err))
	}
	if err := checkName("Process", c.Process); err != nil {
		errs = append(errs, fmt.Errorf("gossip: config Process: %w", err))
	}
	check(c.Interval > 0, "Interval", "must be positive, got %v", c.Interval)
	errs = append(errs, c.validateRegions()...)
	names := make([]string, 0, len(c.Weights))
	for name := range c.Weights {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := checkName("region", name); err != nil {
			errs = append(errs, fmt.Errorf("gossip: config Weights: %w", err))
		}
		w := c.Weights[name]
		check(finite(w) && w >= 0, "Weights", "region %q weight must be a finite number ≥ 0, got %v", name, w)
	}
	check(finite(c.Floor) && c.Floor > 0 && c.Floor <= 0.5, "Floor", "must be in (0, 0.5], got %v", c.Floor)
	check(finite(c.Prior) && c.Prior >= 0, "Prior", "must be ≥ 0, got %v", c.Prior)
	check(c.HalfLife >= 0, "HalfLife", "must not be negative, got %v", c.HalfLife)
	check(c.TrustRamp >= 0, "TrustRamp", "must not be negative, got %v", c.TrustRamp)
	check(finite(c.Hysteresis) && c.Hysteresis >= 0 && c.Hysteresis < 1, "Hysteresis", "must be in [0, 1), got %v", c.Hysteresis)
	check(c.WeightHalfLife > 0, "WeightHalfLife", "must be positive, got %v", c.WeightHalfLife)
	check(finite(c.WeightPrior) && c.WeightPrior > 0, "WeightPrior", "must be positive, got %v", c.WeightPrior)
	check(finite(c.WeightBand) && c.WeightBand >= 1, "WeightBand", "must be at least 1, got %v", c.WeightBand)
	check(c.TopK >= 1, "TopK", "must be at least 1, got %d", c.TopK)
	check(finite(c.MaxClaim) && c.MaxClaim > 0, "MaxClaim", "must be positive, got %v", c.MaxClaim)
	check(c.MaxProcesses >= 1, "MaxProcesses", "must be at least 1, got %d", c.MaxProcesses)
	check(c.MaxKeys >= 1, "MaxKeys", "must be at least 1, got %d", c.MaxKeys)
	check(c.MaxRegionKeys >= c.MaxKeys, "MaxRegionKeys", "must be at least MaxKeys (%d), got %d", c.MaxKeys, c.MaxRegionKeys)
	check(c.HotKeyMetrics >= 0 && c.HotKeyMetrics <= 100, "HotKeyMetrics", "must be in [0, 100], got %d", c.HotKeyMetrics)
	check(c.MaxDigestBytes >= 512 && c.MaxDigestBytes <= MaxDigestSize, "MaxDigestBytes", "must be in [512, %d], got %d", MaxDigestSize, c.MaxDigestBytes)
	check(c.StaleAfter >= 1, "StaleAfter", "must be at least 1, got %d", c.StaleAfter)
	check(c.WarmUp >= 1, "WarmUp", "must be at least 1, got %d", c.WarmUp)
	check(finite(c.ChangeThreshold) && c.ChangeThreshold >= 0 && c.ChangeThreshold < 1, "ChangeThreshold", "must be in [0, 1), got %v", c.ChangeThreshold)
	check(c.Subject != "", "Subject", "must not be empty")
	return errors.Join(errs...)
}

// validateRegions checks Regions, and Weights against it.
func (c *Config) validateRegions() []error {
	var errs []error
	if len(c.Regions) == 0 {
		return []error{fmt.Errorf("gossip: config Regions: must name every region, %q included", c.Region)}
	}
	set := make(map[string]bool, len(c.Regions))
	for _, r := range c.Regions {
		if err := checkName("region", r); err != nil {
			errs = append(errs, fmt.Errorf("gossip: config Regions: %w", err))
		}
		if set[r] {
			errs = append(errs, fmt.Errorf("gossip: config Regions: region %q repeated", r))
		}
		set[r] = true
	}
	if c.Region != "" && !set[c.Region] {
		errs = append(errs, fmt.Errorf("gossip: config Regions: must include this region %q, got %v", c.Region, c.Regions))
	}
	if len(c.Weights) == 0 {
		return errs
	}
	for _, r := range c.Regions {
		if _, ok := c.Weights[r]; !ok {
			errs = append(errs, fmt.Errorf("gossip: config Weights: no weight for region %q (weigh every region in Regions, or none)", r))
		}
	}
	names := make([]string, 0, len(c.Weights))
	for r := range c.Weights {
		if !set[r] {
			names = append(names, r)
		}
	}
	sort.Strings(names)
	for _, r := range names {
		errs = append(errs, fmt.Errorf("gossip: config Weights: region %q is not in Regions %v", r, c.Regions))
	}
	return errs
}
