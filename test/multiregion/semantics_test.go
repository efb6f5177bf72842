package multiregion

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// Per-plan semantics in the scenarios (docs/design.md [plan-semantics]):
// every scenario also runs an exact key (mode exact, failure policy closed)
// at twice its limit, and the Redis kill a closed-policy leased key under
// its limit.
const (
	exactPlan  = "exact"
	closedPlan = "closed"
	// semRate and semCapacity are the exact plan's limit: capacity is two
	// seconds of rate, and the smallest region share at the start (ap 0.2)
	// holds the dearest endpoint (cost 5).
	semRate     = 20.0
	semCapacity = 40.0
	// closedCapacity is the closed plan's (same rate): a burst of 5 s, so
	// that the smallest region's share, 4 cost/s for 3.2 of demand, is not
	// run down by the dearest endpoint's lumps (cost 5).
	closedCapacity = 100.0
	exactDemand    = 2.0 // the exact key's demand, × its rate: it is rejected often
	// closedDemand is the closed key's demand, × its rate: under its limit,
	// at half of what each region's demand-weighted share pays for. Its
	// requests all go to the cheapest endpoint, cost 1 (closedLoad): the
	// outage window is 5 s, in which ap sends about 10 cost, and one
	// refused cost-5 lump (a share not yet caught up with the history)
	// failed the 90 % ap must serve, at 0.8 × the rate and at 0.5.
	closedDemand = 0.5
	// regainedWithin is how soon after its Redis answers again eu must be
	// back on it (as for the leased keys: ProbeTimeout, with a margin).
	regainedWithin = 2 * time.Second
	// servedFraction is the least part of its demand a region with a
	// working store must allow the closed key, which stays under its limit.
	servedFraction = 0.9
)

var (
	exactFields  = PlanFields{Rate: semRate, Capacity: semCapacity, Mode: "exact", FailurePolicy: "closed"}
	closedFields = PlanFields{Rate: semRate, Capacity: closedCapacity, FailurePolicy: "closed"}
)

// setSemanticPlans writes the exact and closed plans.
func setSemanticPlans(c *Cluster) {
	c.SetPlanFields(exactPlan, exactFields)
	c.SetPlanFields(closedPlan, closedFields)
}

// semantics are a scenario's keys of the plan-semantics checks and their
// decisions.
type semantics struct {
	log                   *decisionLog
	exact, closed, leased string // closed is "" unless the scenario has one
}

// closedLoad is the closed-policy key's demand, for a scenario that has
// it, on the run's cheapest endpoint.
func (s *scenarioRun) closedLoad() KeyLoad {
	cheapest := s.endpoints[0]
	for _, e := range s.endpoints {
		if e.Cost < cheapest.Cost {
			cheapest = e
		}
	}
	return KeyLoad{Key: s.prefix + "closed", Rate: closedDemand * semRate, Endpoint: &cheapest}
}

// addSemantics adds the exact key to the scenario's traffic, puts it (and
// the closed key, when the traffic has it) on its plan, and logs their
// decisions and those of a leased key to compare with: the busiest Zipf
// key, over its limit as the exact key is.
func (s *scenarioRun) addSemantics(tr *Traffic) {
	sem := &semantics{exact: s.prefix + "exact", leased: tr.Keys[0].Key}
	for _, k := range tr.Keys {
		switch k.Key {
		case s.prefix + "k-0":
			sem.leased = k.Key
		case s.prefix + "closed":
			sem.closed = k.Key
		}
	}
	s.c.AssignKey(sem.exact, exactPlan)
	if sem.closed != "" {
		s.c.AssignKey(sem.closed, closedPlan)
	}
	tr.Keys = append(tr.Keys, KeyLoad{Key: sem.exact, Rate: exactDemand * semRate})
	sem.log = newDecisionLog(sem.exact, sem.closed, sem.leased)
	tr.Observe = sem.log.observe
	s.sem = sem
}

// waitSemantics waits until every live node resolves the keys to their
// plans.
func (s *scenarioRun) waitSemantics() {
	s.c.WaitPlanFields(30*time.Second, exactFields, s.sem.exact)
	if s.sem.closed != "" {
		s.c.WaitPlanFields(30*time.Second, closedFields, s.sem.closed)
	}
}

// semanticChecks asserts 0 over-admission for the exact key, over the run
// and over every interval of it, faults included, and that it never
// allowed in degraded mode; it reports its client latency next to the
// leased key's.
//
// Each region enforces its share of the exact key exactly, on a bucket of
// rate × share and capacity × share; the shares of a key sum to 1, so all
// regions together give out at most rate·T + capacity over any T. A Redis
// that loses its state gives its region a full bucket again (share ×
// capacity); the region rejected everything while its store was down and
// so did not spend share × rate × F of refill, which covers it when rate ×
// F ≥ capacity (here 20 × 5 s ≥ 40 in the short form): the bound stays
// rate·T + capacity, with no allowance.
func (s *scenarioRun) semanticChecks(rec *Record, f *Figures) {
	sem := s.sem
	evs := sem.log.events(sem.exact)
	series := rec.Series(sem.exact)[""]
	var adm, dem int64
	for _, c := range series {
		adm += c.Allowed
		dem += c.Allowed + c.Rejected
	}
	phases := []PlanPhase{{Rate: semRate, Capacity: semCapacity}}
	lim := 0.0
	if len(series) > 0 {
		lim = limitOver(phases, 0, len(series)-1, f.Duration.Seconds())
	}
	f.check("exact key: admitted / (rate·T + capacity), whole run", adm > 0 && float64(adm) <= lim,
		fmt.Sprintf("%.4f (%s: %d of %.0f; demand %d)", float64(adm)/math.Max(lim, 1), sem.exact, adm, lim, dem), "≤ 1 (0 over-admission)")
	ex, from, to, inAdm := intervalExcess(evs, semRate, semCapacity)
	f.check("exact key: admitted − (rate·t + capacity), worst interval of the run", len(evs) > 0 && ex <= 0,
		fmt.Sprintf("%.1f (%d admitted in [%.3f s, %.3f s], bound %.1f; %d decisions, each counted in an interval only if sent and answered within it)",
			ex, inAdm, from.Seconds(), to.Seconds(), float64(inAdm)-ex, len(evs)), "≤ 0")
	t := tallyOf(evs)
	f.check("exact key: nothing allowed degraded; every degraded answer says failure_policy closed", len(evs) > 0 && t.AllowedDegraded == 0 && t.OtherPolicy == 0,
		fmt.Sprintf("%d allowed degraded, %d degraded under another policy, %d rejected degraded (closed)", t.AllowedDegraded, t.OtherPolicy, t.ClosedRejected), "0 and 0")
	var parts []string
	for _, r := range s.c.Regions() {
		var a, d int64
		for _, c := range rec.Series(sem.exact)[r] {
			a += c.Allowed
			d += c.Allowed + c.Rejected
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d", r, a, d))
	}
	s.note("exact key %s (plan %s: %v/s, capacity %v, mode exact, failure_policy closed) at %g × its rate: admitted/demanded by region %s.",
		sem.exact, exactPlan, semRate, semCapacity, exactDemand, strings.Join(parts, ", "))
	le := sem.log.events(sem.leased)
	f.check("exact vs leased key, client latency (one check per call)", len(evs) > 0 && len(le) > 0,
		fmt.Sprintf("exact %s p50 %.2f ms, p99 %.2f ms (%d calls); leased %s p50 %.2f ms, p99 %.2f ms (%d calls)",
			sem.exact, ms(latency(evs, 0.5)), ms(latency(evs, 0.99)), len(evs), sem.leased, ms(latency(le, 0.5)), ms(latency(le, 0.99)), len(le)),
		"reported (no target)")
	s.note("store calls per decision of the exact key are not measured here: the daemons count store calls for all keys together (quota_store_calls_total, in \"store calls per decision\"); an exact check makes one store call unless its last call shows it cannot be paid (BenchmarkExactVsLeased: 1.0 against a leased hot key's 0.0007).")
}

// closedKeyChecks asserts, for the Redis kill in eu, that eu answered the
// exact and closed keys by rejecting them (flagged degraded, policy closed)
// while its store was down, that the other regions kept serving the closed
// key, and that eu served it again once its store answered.
func (s *scenarioRun) closedKeyChecks(f *Figures) {
	sem := s.sem
	if len(s.faults) == 0 || sem.closed == "" {
		f.check("closed key through the Redis kill", false, "no fault or no closed key in the run", "ran")
		return
	}
	ft := s.faults[0]
	down := fmt.Sprintf("sent after %.3f s, answered before %.3f s", ft.From.Seconds(), ft.To.Seconds())

	ex := tallyOf(within(sem.log.events(sem.exact), ft.Region, ft.From, ft.To))
	f.check(fmt.Sprintf("exact key: %s's answers while its Redis was down all rejected, degraded, closed", ft.Region),
		ex.Decisions > 0 && ex.Allowed == 0 && ex.ClosedRejected > 0 && ex.OtherPolicy == 0,
		fmt.Sprintf("%d decisions (%s): %d cost allowed, %d rejected degraded (closed), %d degraded under another policy",
			ex.Decisions, down, ex.Allowed, ex.ClosedRejected, ex.OtherPolicy), "0 allowed")

	evs := sem.log.events(sem.closed)
	eu := tallyOf(within(evs, ft.Region, ft.From, ft.To))
	lb := leaseBound(s.c.Spec(), semRate)
	f.check(fmt.Sprintf("closed key: %s rejects it, degraded and closed, while its Redis is down", ft.Region),
		eu.ClosedRejected > 0 && eu.AllowedDegraded == 0 && eu.OtherPolicy == 0 && eu.Allowed <= lb,
		fmt.Sprintf("%d decisions (%s): %d rejected degraded (closed), %d allowed degraded, %d degraded under another policy; %d of %d cost allowed, from leases taken before the kill (≤ %d: %d processes × a lease of at most %d)",
			eu.Decisions, down, eu.ClosedRejected, eu.AllowedDegraded, eu.OtherPolicy, eu.Allowed, eu.Demand, lb, s.c.Spec().Processes, lb/int64(s.c.Spec().Processes)),
		"all rejected but leases")
	var parts []string
	ok := true
	for _, r := range s.c.Regions() {
		if r == ft.Region {
			continue
		}
		t := tallyOf(within(evs, r, ft.From, ft.To))
		ok = ok && t.Demand > 0 && float64(t.Allowed) >= servedFraction*float64(t.Demand)
		parts = append(parts, fmt.Sprintf("%s %d of %d (%d rejected degraded)", r, t.Allowed, t.Demand, t.ClosedRejected))
	}
	f.check("closed key: the other regions keep serving it during the outage", ok,
		"allowed "+strings.Join(parts, ", "), fmt.Sprintf("≥ %.0f %% of demand each", 100*servedFraction))
	after := tallyOf(within(evs, ft.Region, ft.From, f.Duration+time.Minute))
	back := s.back + regainedWithin
	served := tallyOf(within(evs, ft.Region, back, f.Duration+time.Minute))
	f.check(fmt.Sprintf("closed key: %s serves it again after its Redis answered", ft.Region),
		after.LastDegradedAt <= back && served.Demand > 0 && float64(served.Allowed) >= servedFraction*float64(served.Demand),
		fmt.Sprintf("last degraded answer %.3f s after the Redis answered (%.3f s); from %.3f s on, %d of %d cost allowed",
			(after.LastDegradedAt-s.back).Seconds(), s.back.Seconds(), back.Seconds(), served.Allowed, served.Demand),
		fmt.Sprintf("≤ %v, then ≥ %.0f %% allowed", regainedWithin, 100*servedFraction))
}

// leaseBound is the most a region can admit of a leased key from the leases
// its processes held when its store went down: each holds at most one
// lease, of at most max(the dearest endpoint, lease cap), the cap being
// 0.01 × rate × share × 60 s ÷ processes (region.Config AccuracyBudget,
// AccuracyHorizon), taken here with the largest share a region can have
// (1 − the other regions' floors) and one process (one that has not seen
// its region's others yet).
func leaseBound(sp Spec, rate float64) int64 {
	var dearest int64
	for _, e := range endpoints {
		dearest = max(dearest, e.Cost)
	}
	share := 1 - float64(len(sp.Regions)-1)*sp.ShareFloor
	capCost := int64(0.01 * rate * share * 60)
	return int64(sp.Processes) * max(dearest, capCost)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func TestIntervalExcess(t *testing.T) {
	sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	// A bucket of rate 10, capacity 20, drained by checks of cost 1 every
	// 10 ms from t = 0, each answered 1 ms after it is sent: it admits the
	// capacity, then the rate.
	bucket := func() []Observed {
		var evs []Observed
		tokens, last := 20.0, 0.0
		for i := 0; i < 500; i++ {
			at := float64(i) * 0.01
			tokens = math.Min(20, tokens+10*(at-last))
			last = at
			ok := tokens >= 1
			if ok {
				tokens--
			}
			evs = append(evs, Observed{Key: "k", Cost: 1, Allowed: ok, Start: sec(at), End: sec(at + 0.001)})
		}
		return evs
	}
	evs := bucket()
	if ex, from, to, adm := intervalExcess(evs, 10, 20); ex > 0 {
		t.Fatalf("an exact bucket: excess %v in [%v, %v] (%d admitted)", ex, from, to, adm)
	}
	// One more check allowed anywhere is over-admission.
	for _, i := range []int{3, 250, 499} {
		evs := bucket()
		for j := i; j < len(evs); j++ {
			if !evs[j].Allowed {
				evs[j].Allowed = true
				break
			}
		}
		if ex, _, _, _ := intervalExcess(evs, 10, 20); ex <= 0 {
			t.Fatalf("one check over, from %d: excess %v, want > 0", i, ex)
		}
	}
	// A decision that straddles an interval's end does not count in it:
	// 21 checks sent at 0 and answered at once are over, but not when the
	// last was answered a second later (the store may have taken it then).
	var burst []Observed
	for i := 0; i < 21; i++ {
		burst = append(burst, Observed{Cost: 1, Allowed: true, Start: 0, End: time.Millisecond})
	}
	if ex, _, _, _ := intervalExcess(burst, 10, 20); ex <= 0 {
		t.Fatalf("21 at once on capacity 20: excess %v, want > 0", ex)
	}
	burst[20].End = time.Second
	if ex, _, _, _ := intervalExcess(burst, 10, 20); ex > 0 {
		t.Fatalf("the 21st answered after 1 s: excess %v, want ≤ 0", ex)
	}
	if ex, _, _, _ := intervalExcess(nil, 10, 20); ex > 0 {
		t.Fatalf("no decisions: excess %v", ex)
	}
}

func TestTallyAndWithin(t *testing.T) {
	s := time.Second
	evs := []Observed{
		{Region: "eu", Cost: 2, Allowed: true, Start: 1 * s, End: 1*s + 1},                                           // before
		{Region: "eu", Cost: 1, Allowed: false, Degraded: true, FailurePolicy: "closed", Start: 3 * s, End: 3*s + 1}, // in
		{Region: "eu", Cost: 5, Allowed: true, Start: 4 * s, End: 4*s + 1},                                           // in, from a lease
		{Region: "eu", Cost: 1, Allowed: true, Degraded: true, FailurePolicy: "closed", Start: 5 * s, End: 5*s + 1},  // in: a closed allow
		{Region: "eu", Cost: 1, Allowed: true, Degraded: true, FailurePolicy: "degraded", Start: 6 * s, End: 6*s + 1},
		{Region: "eu", Cost: 1, Allowed: false, Start: 7 * s, End: 9 * s}, // straddles the end
		{Region: "us", Cost: 1, Allowed: true, Start: 3 * s, End: 3*s + 1},
	}
	got := tallyOf(within(evs, "eu", 2*s, 8*s))
	want := tally{Decisions: 4, Allowed: 7, AllowedDegraded: 1, Demand: 8, ClosedRejected: 1, OtherPolicy: 1, LastDegradedAt: 6*s + 1}
	if got != want {
		t.Fatalf("tally = %+v, want %+v", got, want)
	}
	if n := len(within(evs, "", 2*s, 8*s)); n != 5 {
		t.Fatalf("within all regions: %d decisions, want 5", n)
	}
}

func TestLeaseBound(t *testing.T) {
	sp := DefaultSpec()
	// 0.01 × 20 × 0.9 × 60 = 10.8: a lease of at most 10, two processes.
	if got := leaseBound(sp, 20); got != 20 {
		t.Fatalf("leaseBound = %d, want 20", got)
	}
	// A small rate: the dearest endpoint (5) bounds a lease.
	if got := leaseBound(sp, 1); got != 10 {
		t.Fatalf("leaseBound(rate 1) = %d, want 10", got)
	}
}
