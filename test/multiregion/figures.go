package multiregion

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// PlanPhase is a key's plan from an elapsed time of the run on.
type PlanPhase struct {
	From     time.Duration
	Rate     float64
	Capacity float64
}

// Fault is an interval of the run during which one region was degraded
// (store killed or slow). StoreLost: the store's state was lost, so the
// region's bucket came back full.
type Fault struct {
	Name      string
	Region    string
	From, To  time.Duration
	StoreLost bool
}

// Check is one asserted figure.
type Check struct {
	Name   string
	Value  string
	Target string
	OK     bool
	// Ungated: the figure is reported but never fails the test (every
	// check of a counterfactual run, which shows that a check can fail).
	Ungated bool
}

// Figures are one scenario's measured figures.
type Figures struct {
	Scenario string
	Mode     Mode
	Duration time.Duration

	Decisions       int64
	DemandCost      int64
	AllowedCost     int64
	DegradedCost    int64
	AccuracyKey     string  // the key with the worst admitted/limit
	Admitted, Limit float64 // of AccuracyKey over the run
	AccuracyRatio   float64 // Admitted / Limit
	WindowLen       int     // seconds of the sliding window
	WindowRatio     float64 // worst admitted/limit over sliding windows (all keys)
	WindowKey       string  // the key and start second of that window
	WindowStart     int
	Bound           float64 // the run's documented bound for AccuracyKey (1.01 × limit in normal operation)
	FaultAdmitted   float64 // admitted during the fault (AccuracyKey, all regions)
	FaultBound      float64 // the documented degraded bound for it
	UnderKeys       int
	UnderDemand     int64
	UnderRejected   int64
	// UnderRejectedBy splits UnderRejected by region, and
	// UnderRejectedDegraded the part of it the degraded buckets rejected.
	UnderRejectedBy, UnderRejectedDegraded map[string]int64
	// UnderRejectedSec is UnderRejected per second of the run.
	UnderRejectedSec    []int64
	WrongRejectPct      float64
	Failed, LostInCrash int
	FirstFailures       []Failure
	P50, P99            time.Duration // per HTTP call, client side
	P99PerCheck         time.Duration
	FastP50, FastP99    time.Duration // the fast-path probe, client side
	FastN               int
	ServerP99           time.Duration // every check, from the daemon's HTTP histogram
	ServerFastP99       time.Duration // fast-path checks, from the daemon's check histogram
	ServerFastN         float64       // fast-path checks observed
	StoreCalls          float64
	StoreCallsPerDec    float64
	Ledger              LedgerCheck
	Setup               string // the cluster and workload, one line
	Notes               []string
	Checks              []Check
	Plots               []Plot
}

// Plot is an SVG plot: a file name under the report's img/ directory.
type Plot struct {
	Title string
	File  string
	SVG   []byte
}

// keyPlan returns the plan of key in second s.
func planAt(phases []PlanPhase, s int) PlanPhase {
	at := time.Duration(s) * time.Second
	p := phases[0]
	for _, ph := range phases {
		if ph.From <= at {
			p = ph
		}
	}
	return p
}

// limitOver is the plan's limit over seconds [a, b] of a run that lasted
// end seconds: Σ rate × (the part of each second within the run) + the
// largest capacity in force.
func limitOver(phases []PlanPhase, a, b int, end float64) float64 {
	sum, capacity := 0.0, 0.0
	for s := a; s <= b; s++ {
		p := planAt(phases, s)
		sum += p.Rate * math.Max(0, math.Min(1, end-float64(s)))
		capacity = math.Max(capacity, p.Capacity)
	}
	return sum + capacity
}

// accuracy computes, for every key with a plan, admitted over the run
// against its limit, and the worst sliding window of length L.
func (f *Figures) accuracy(rec *Record, plans map[string][]PlanPhase) {
	n := rec.Seconds()
	f.WindowLen = min(60, n)
	for key, phases := range plans {
		series := rec.Series(key)[""]
		if len(series) == 0 {
			continue
		}
		total := 0.0
		for _, c := range series {
			total += float64(c.Allowed)
		}
		lim := limitOver(phases, 0, len(series)-1, f.Duration.Seconds())
		if r := total / lim; r > f.AccuracyRatio || f.AccuracyKey == "" {
			f.AccuracyKey, f.Admitted, f.Limit, f.AccuracyRatio = key, total, lim, r
		}
		L := min(f.WindowLen, len(series))
		for a := 0; a+L <= len(series); a++ {
			sum := 0.0
			for s := a; s < a+L; s++ {
				sum += float64(series[s].Allowed)
			}
			if r := sum / limitOver(phases, a, a+L-1, f.Duration.Seconds()); r > f.WindowRatio {
				f.WindowRatio, f.WindowKey, f.WindowStart = r, key, a
			}
		}
	}
}

// underLimit reports whether a key's demand per second stays within 90 %
// of a token bucket of its plan (so that an exact limiter would reject
// nothing).
func underLimit(demand []float64, phases []PlanPhase) bool {
	tokens := planAt(phases, 0).Capacity * 0.9
	for s, d := range demand {
		p := planAt(phases, s)
		tokens = math.Min(p.Capacity*0.9, tokens+p.Rate*0.9)
		if d > tokens {
			return false
		}
		tokens -= d
	}
	return true
}

// wrongRejections adds up the rejected cost of keys whose demand stayed
// under their limit.
func (f *Figures) wrongRejections(rec *Record, plans map[string][]PlanPhase) {
	for key, phases := range plans {
		series := rec.Series(key)[""]
		demand := make([]float64, len(series))
		var dem, rej int64
		for s, c := range series {
			demand[s] = float64(c.Allowed + c.Rejected)
			dem += c.Allowed + c.Rejected
			rej += c.Rejected
		}
		if dem == 0 || !underLimit(demand, phases) {
			continue
		}
		f.UnderKeys++
		f.UnderDemand += dem
		f.UnderRejected += rej
		for region, cells := range rec.Series(key) {
			if region == "" {
				for sec, c := range cells {
					for len(f.UnderRejectedSec) <= sec {
						f.UnderRejectedSec = append(f.UnderRejectedSec, 0)
					}
					f.UnderRejectedSec[sec] += c.Rejected
				}
				continue
			}
			for _, c := range cells {
				if f.UnderRejectedBy == nil {
					f.UnderRejectedBy, f.UnderRejectedDegraded = make(map[string]int64), make(map[string]int64)
				}
				f.UnderRejectedBy[region] += c.Rejected
				f.UnderRejectedDegraded[region] += c.DegradedRejected
			}
		}
	}
	if f.UnderDemand > 0 {
		f.WrongRejectPct = 100 * float64(f.UnderRejected) / float64(f.UnderDemand)
	}
}

// faultBound computes the documented bound of what key may be admitted, by
// all regions together, during the fault: the other regions enforce their
// share normally (1.01 × (1 − s) × L), the faulty region's processes each
// enforce max(local share, floor) × s × L, which sums to at most
// spec.DegradedFactor() × s × L; a lost store adds the region's fresh
// bucket, s × capacity. s is the largest share of the region seen during
// the fault (its --region-weights weight when gossip is off), L = rate ×
// length + capacity.
func faultBound(spec Spec, fault Fault, phases []PlanPhase, share float64, secs int, end float64) float64 {
	a := int(fault.From / time.Second)
	b := min(int(math.Ceil(fault.To.Seconds())), secs-1)
	L := limitOver(phases, a, b, end)
	bound := (1-share)*1.01*L + spec.DegradedFactor()*share*L
	if fault.StoreLost {
		bound += share * planAt(phases, b).Capacity
	}
	return bound
}

// admittedOver adds a key's allowed cost over [from, to] (whole seconds
// covering it).
func admittedOver(rec *Record, key string, from, to time.Duration) float64 {
	series := rec.Series(key)[""]
	a := int(from / time.Second)
	b := min(int(math.Ceil(to.Seconds())), len(series)-1)
	sum := 0.0
	for s := a; s <= b && s < len(series); s++ {
		sum += float64(series[s].Allowed)
	}
	return sum
}

// maxShare is the largest share of region among the samples within
// [from, to]; fallback when there are none.
func maxShare(samples []ShareSample, region string, from, to time.Duration, fallback float64) float64 {
	best, seen := 0.0, false
	for _, s := range samples {
		if s.At >= from-time.Second && s.At <= to+time.Second {
			if v, ok := s.Shares[region]; ok {
				best, seen = math.Max(best, v), true
			}
		}
	}
	if !seen {
		return fallback
	}
	return best
}

func (f *Figures) check(name string, ok bool, value, target string) {
	f.Checks = append(f.Checks, Check{Name: name, Value: value, Target: target, OK: ok})
}

// Missed lists the checks that missed their target.
func (f *Figures) Missed() []Check {
	var out []Check
	for _, c := range f.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkLedger sets the run's ledger comparison and asserts it, as every
// scenario does: the ledger's spent equals what the clients saw allowed
// (of whose, which processes were compared: "live processes", "per
// process"), and its degraded cost what they saw flagged degraded.
func (f *Figures) checkLedger(l LedgerCheck, whose string) {
	f.Ledger = l
	if !l.Wired {
		f.check("ledger spent == allowed seen by clients", false, "no usage report reached the ledger (is the Reporter wired into the daemon?)", "exact")
		return
	}
	v := fmt.Sprintf("ledger %d, clients %d", l.LedgerSpent, l.ClientAllowed)
	if len(l.Mismatches) > 0 {
		v += "; " + strings.Join(l.Mismatches, "; ")
	}
	f.check("ledger spent == allowed seen by clients ("+whose+")", l.Exact(), v, "exact")
	f.check("ledger degraded == degraded seen by clients", l.ClientDegraded == l.LedgerDegraded,
		fmt.Sprintf("ledger %d, clients %d", l.LedgerDegraded, l.ClientDegraded), "exact")
}
