package multiregion

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/participant"
	"github.com/quotaplatform/quota/region"
)

// The quota-exhaustion scenario (docs/design.md [quotas]): one key on a
// plan with a monthly quota and a larger daily one, demanded from the three
// regions at a pace that spends the month's quota half-way through the run
// while the token bucket stays far from binding; the store of one region is
// killed before the quota runs out and started again, empty, after.
const (
	quotaScenario = "quota-exhaustion"
	// quotaDownRegion is the region whose redis-server is killed: the one
	// with the largest share, as in redis-killed.
	quotaDownRegion = "eu"
	// quotaRateFactor is the plan's rate (and capacity) over the offered
	// demand: every region's share of the bucket stays twice its demand, so
	// the quota binds, not the bucket.
	quotaRateFactor = 2.0
	// quotaDayFactor is the daily quota over the monthly one: larger, so
	// that the month binds and both are listed.
	quotaDayFactor = 2
	// quotaResetSlack is how far a rejected answer's month reset_ms may be
	// from the month's end as the harness computes it, beyond the time the
	// answer spent in flight.
	quotaResetSlack = 2 * time.Second
)

// quotaForm is the scenario's schedule in one form of the harness: the run,
// when the region's Redis is killed and started again, the tail of the run
// whose answers must all be quota rejections, and the offered demand in
// cost units per second (spread over the regions by the spec's weights).
// The monthly quota is offered × run / 2: spent half-way at the offered
// pace.
type quotaForm struct {
	run, kill, restore, tail time.Duration
	offered                  float64
}

func quotaFormOf(m Mode) quotaForm {
	if m == ModeFull {
		return quotaForm{run: 90 * time.Second, kill: 18 * time.Second, restore: 60 * time.Second, tail: 10 * time.Second, offered: 200}
	}
	return quotaForm{run: 36 * time.Second, kill: 7 * time.Second, restore: 22 * time.Second, tail: 4 * time.Second, offered: 200}
}

// TestQuotaExhaustion spends a monthly quota across three regions with one
// region's Redis killed part-way, and checks the bound of docs/design.md
// [quotas]: the fleet admits at most the quota plus the larger of 0.1 % of
// it and one report interval's traffic, and at least the quota less that;
// then every region rejects the key for its quota with the month's end as
// reset; every answer of the killed region that needed its store is
// flagged degraded; the ledger equals what the clients saw.
func TestQuotaExhaustion(t *testing.T) {
	mode := requireMode(t)
	began := time.Now()
	form := quotaFormOf(mode)
	if now := time.Now().UTC(); time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Sub(now) < form.run+3*time.Minute {
		t.Skip("quota-exhaustion: the run would cross a UTC day boundary (a new daily period, maybe a new month); run it again after midnight UTC")
	}
	c := startScenarioCluster(t, scenarioSpec(mode))
	started := time.Since(began)
	runQuotaExhaustion(t, c, mode, form)
	t.Logf("%s: wall time %.1f s (cluster start %.1f s)", quotaScenario, time.Since(began).Seconds(), started.Seconds())
}

// quotaRun is the scenario's state: its plan, key, bound and what happened
// when.
type quotaRun struct {
	c      *Cluster
	mode   Mode
	form   quotaForm
	prefix string
	key    string
	plan   PlanFields
	limit  int64 // the monthly quota
	// every is one report interval: the limiter hands usage to the
	// reporter every FlushInterval (the participant's default; the daemon
	// has no flag for it) and the reporter publishes every
	// --report-interval (Spec.ReportInterval); the longer of the two.
	every time.Duration
	bound float64 // max(0.1 % of the limit, one report interval's offered traffic)

	kill, restart, back time.Duration // Redis killed; restart called; answering again
	notes               []string
}

func (q *quotaRun) note(format string, args ...any) {
	q.notes = append(q.notes, fmt.Sprintf(format, args...))
}

func runQuotaExhaustion(t *testing.T, c *Cluster, mode Mode, form quotaForm) {
	c.t = t
	spec := c.Spec()
	// A fresh key (and plan) per run: the ledger holds nothing of it in
	// this calendar month.
	prefix := fmt.Sprintf("%s-%d-", quotaScenario, time.Now().UnixNano()%1_000_000_000)
	limit := int64(form.offered * form.run.Seconds() / 2)
	q := &quotaRun{c: c, mode: mode, form: form, prefix: prefix, key: prefix + "k", limit: limit,
		plan: PlanFields{
			Rate: quotaRateFactor * form.offered, Capacity: quotaRateFactor * form.offered,
			Quotas:   []Quota{{Period: "month", Limit: limit}, {Period: "day", Limit: quotaDayFactor * limit}},
			TimeZone: "UTC", AnchorDay: 1,
		},
		every: max(spec.ReportInterval, participant.DefaultOptions().Limiter.FlushInterval),
	}
	q.bound = math.Max(0.001*float64(limit), form.offered*q.every.Seconds())
	c.SetPlanFields(prefix+"plan", q.plan)
	c.AssignKey(q.key, prefix+"plan")
	c.WaitPlanFields(30*time.Second, q.plan, q.key)
	c.WaitConverged(30 * time.Second)

	log := newDecisionLog(q.key)
	tr := Traffic{Keys: []KeyLoad{{Key: q.key, Rate: form.offered}}, Endpoints: endpoints, Duration: form.run,
		WatchShares: []string{q.key}, Observe: log.observe}
	g, err := NewGenerator(c, tr)
	if err != nil {
		t.Fatal(err)
	}
	g.Start()
	g.At(form.kill)
	q.kill = g.Elapsed()
	c.KillRedis(quotaDownRegion)
	g.At(form.restore)
	q.restart = g.Elapsed()
	c.RestoreRedis(quotaDownRegion)
	q.back = g.Elapsed() // the server answers again
	rec := g.Wait()
	q.note("%s's redis-server killed at %.1f s, restarted empty at %.1f s and answering at %.3f s", quotaDownRegion, q.kill.Seconds(), q.restart.Seconds(), q.back.Seconds())

	f := q.figures(rec, log.events(q.key))
	addReport(f)
	gateChecks(t, quotaScenario, q.mode, f, rec, false)
}

// figures computes the scenario's checks and notes.
func (q *quotaRun) figures(rec *Record, evs []Observed) *Figures {
	c, spec, form := q.c, q.c.Spec(), q.form
	f := &Figures{Scenario: quotaScenario, Mode: q.mode, Duration: rec.end.Sub(rec.start)}
	f.Setup = fmt.Sprintf("%d regions × %d processes, --window %v, --report-interval %v, --store-timeout %v; one key on a plan of %v/s (capacity %v) "+
		"with quotas month %d and day %d (UTC, anchor day 1), offered %v cost/s (%s by region weight), endpoints %s; run of %v.",
		len(spec.Regions), spec.Processes, spec.Window, spec.ReportInterval, spec.StoreTimeout, q.plan.Rate, q.plan.Capacity,
		q.limit, quotaDayFactor*q.limit, form.offered, spec.weightsFlag(), describeEndpoints(endpoints), form.run)
	tot := rec.Totals()
	f.Decisions, f.AllowedCost, f.DegradedCost, f.DemandCost = tot.Decisions, tot.Allowed, tot.Degraded, tot.Allowed+tot.Rejected
	series := rec.Series(q.key)
	admitted := int64(0)
	byRegion := map[string]int64{}
	for _, r := range spec.Regions {
		for _, cl := range series[r] {
			byRegion[r] += cl.Allowed
		}
		admitted += byRegion[r]
	}
	L := float64(q.limit)
	f.AccuracyKey, f.Admitted, f.Limit, f.AccuracyRatio = q.key, float64(admitted), L, float64(admitted)/L
	f.WindowKey, f.WindowLen, f.WindowRatio = q.key, len(series[""]), f.AccuracyRatio
	f.Bound, f.FaultAdmitted, f.FaultBound = L+q.bound, float64(admitted), L+q.bound

	// The bound, both ways.
	over := float64(admitted) - L
	boundWhy := fmt.Sprintf("max(0.1 %% of %d = %.0f, one report interval %v × offered %v/s = %.0f)",
		q.limit, 0.001*L, q.every, form.offered, form.offered*q.every.Seconds())
	f.check("fleet admitted ≤ quota + bound", float64(admitted) <= L+q.bound,
		fmt.Sprintf("%d ≤ %.0f (quota %d + bound %.0f = %s); over-admission %+.0f cost, %+.3f %% of the quota",
			admitted, L+q.bound, q.limit, q.bound, boundWhy, over, 100*over/L), "≤ quota + bound")
	f.check("fleet admitted ≥ quota − bound", float64(admitted) >= L-q.bound,
		fmt.Sprintf("%d ≥ %.0f (under-admission %.0f cost, %.3f %% of the quota)", admitted, L-q.bound, math.Max(0, -over), 100*math.Max(0, -over)/L),
		"≥ quota − bound")
	q.boundTerms(rec, float64(admitted))
	var parts []string
	for _, r := range spec.Regions {
		parts = append(parts, fmt.Sprintf("%s %d", r, byRegion[r]))
	}
	q.note("admitted cost of %s by region: %s (total %d of quota %d)", q.key, strings.Join(parts, ", "), admitted, q.limit)

	// The quota ran out after the kill: the scenario tests exhaustion with
	// a region's store down, not before.
	first, firstRegion := time.Duration(-1), ""
	for _, e := range evs {
		if e.QuotaRejected && (first < 0 || e.End < first) {
			first, firstRegion = e.End, e.Region
		}
	}
	f.check(fmt.Sprintf("%s's Redis killed before the quota ran out", quotaDownRegion), first > q.kill,
		fmt.Sprintf("killed at %.1f s, first quota rejection at %.1f s (%s)", q.kill.Seconds(), first.Seconds(), firstRegion), "kill < first quota rejection")
	q.exhaustionNotes(evs)
	q.phaseNotes(evs)
	q.counterNotes()

	q.tailChecks(f, rec, evs)
	q.degradedChecks(f, rec, evs)

	failed, _, _ := rec.Failures()
	f.Failed = failed
	f.check("failed API calls", failed == 0, fmt.Sprintf("%d checks", failed), "0")

	f.checkLedger(c.CompareLedger(rec, q.prefix, nil, 30*time.Second), "per process")

	if samples := rec.Samples(q.key); len(samples) > 0 {
		worst := largestShareSum(samples)
		last := samples[len(samples)-1].Shares
		var sh []string
		for _, r := range spec.Regions {
			sh = append(sh, fmt.Sprintf("%s %.3f", r, last[r]))
		}
		q.note("largest Σ over regions of each region's own share of %s (sampled every 500 ms): %.3f; at the end: %s", q.key, worst, strings.Join(sh, ", "))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		q.note("machine load average at the end of the run (1, 5, 15 min): %s on %d CPUs", strings.Join(strings.Fields(string(b))[:3], ", "), runtime.NumCPU())
	}
	f.Notes = q.notes
	f.Plots = q.plots(rec)
	return f
}

// exhaustionNotes reports when each region first rejected the key for its
// quota.
func (q *quotaRun) exhaustionNotes(evs []Observed) {
	firstBy := map[string]time.Duration{}
	for _, e := range evs {
		if d, ok := firstBy[e.Region]; e.QuotaRejected && (!ok || e.End < d) {
			firstBy[e.Region] = e.End
		}
	}
	var parts []string
	for _, r := range q.c.Regions() {
		if d, ok := firstBy[r]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f s", r, d.Seconds()))
		} else {
			parts = append(parts, r+" never")
		}
	}
	q.note("first quota rejection by region: %s (at the offered pace the quota is spent at %.0f s)", strings.Join(parts, ", "), float64(q.limit)/q.form.offered)
}

// tailChecks: in the run's tail every region refuses the key for its
// quota, not degraded, naming the month as tightest, listing both quotas,
// with the month's reset at the month's end. A region may still admit
// crumbs: each region may take its share of what remains by its latest
// base, so the last units of a quota go out as the bases catch up (the
// fleet's total is checked against the bound in runQuotaExhaustion); the
// tail's admitted cost, and the refusals whose month remaining covered
// their cost (a refusal the region's last quota call decided, before a
// base opened room), are noted.
func (q *quotaRun) tailChecks(f *Figures, rec *Record, evs []Observed) {
	from := q.form.run - q.form.tail
	L := q.limit
	for _, r := range q.c.Regions() {
		var n, allowed, notQuota, degraded, notMonth, badList, roomy int
		var allowedCost int64
		worst := time.Duration(0)
		for _, e := range evs {
			if e.Region != r || e.Start < from {
				continue
			}
			n++
			switch {
			case e.Allowed:
				allowed++
				allowedCost += e.Cost
				continue
			case !e.QuotaRejected:
				notQuota++
			}
			if e.Degraded {
				degraded++
			}
			if e.Tightest != "month" {
				notMonth++
			}
			m, okM := quotaOf(e, "month")
			d, okD := quotaOf(e, "day")
			if !okM || !okD || m.Limit != L || d.Limit != quotaDayFactor*L {
				badList++
				continue
			}
			if m.Remaining >= e.Cost {
				roomy++
			}
			// The answer was written between the request's sending and its
			// answer's reading.
			sent, read := rec.start.Add(e.Start), rec.start.Add(e.End)
			end := monthEndUTC(read)
			lo, hi := end.Sub(read), end.Sub(sent)+time.Millisecond
			got := time.Duration(m.ResetMS) * time.Millisecond
			var off time.Duration
			switch {
			case got < lo:
				off = lo - got
			case got > hi:
				off = got - hi
			}
			worst = max(worst, off)
		}
		f.check(fmt.Sprintf("%s rejects the key for its quota in the last %v", r, q.form.tail),
			n > allowed && notQuota == 0 && degraded == 0 && notMonth == 0 && badList == 0,
			fmt.Sprintf("%d answers, %d refused: %d refused without quota_rejected, %d degraded, %d with tightest ≠ month, %d without month %d and day %d listed",
				n, n-allowed, notQuota, degraded, notMonth, badList, L, quotaDayFactor*L),
			"every refusal for the quota, tightest month")
		q.note("%s in the last %v: %d allowed (%d cost) as bases caught up; %d refusals showed a month remaining ≥ their cost", r, q.form.tail, allowed, allowedCost, roomy)
		f.check(fmt.Sprintf("%s: month reset_ms at the month's end (UTC, anchor 1)", r), n > 0 && badList == 0 && worst <= quotaResetSlack,
			fmt.Sprintf("worst %.3f s off %s, beyond the answer's time in flight", worst.Seconds(), monthEndUTC(time.Now()).Format(time.RFC3339)),
			fmt.Sprintf("≤ %v", quotaResetSlack))
	}
}

// degradedChecks: while the region's Redis was down, its answers that
// needed the store are flagged degraded. An answer spent from a lease held
// at the kill needs no store and is not degraded (docs/design.md
// [degraded-mode]); those can admit at most the quota leases the region's
// processes held, and none is left once every lease has expired (LeaseTTL
// after the kill; the local quota rejection of an exhausted key lasts as
// long). The region is back on its store within 2 s of the restart.
func (q *quotaRun) degradedChecks(f *Figures, rec *Record, evs []Observed) {
	spec := q.c.Spec()
	cfg := region.DefaultConfig() // the daemon's lease settings: it has no flags for them
	r := quotaDownRegion
	share := maxShare(rec.Samples(q.key), r, 0, q.restart, spec.Weights[r])
	procs := float64(spec.Processes)
	var dearest int64
	for _, e := range endpoints {
		dearest = max(dearest, e.Cost)
	}
	rateCap := cfg.AccuracyBudget * q.plan.Rate * share * cfg.AccuracyHorizon.Seconds() / procs
	quotaCap := cfg.QuotaAccuracy * float64(q.limit) * share / procs
	leases := procs * math.Max(float64(dearest), math.Max(rateCap, quotaCap))
	strictFrom := q.kill + cfg.LeaseTTL + time.Second

	var n, deg, strictN, strictNotDeg int
	var leaseAllowed, degAllowed int64
	var lastDeg time.Duration
	for _, e := range evs {
		if e.Region != r {
			continue
		}
		if e.Degraded {
			lastDeg = max(lastDeg, e.End)
		}
		if e.Start < q.kill || e.End > q.restart {
			continue
		}
		n++
		if e.Degraded {
			deg++
			if e.Allowed {
				degAllowed += e.Cost
			}
		} else if e.Allowed {
			leaseAllowed += e.Cost
		}
		if e.Start >= strictFrom {
			strictN++
			if !e.Degraded {
				strictNotDeg++
			}
		}
	}
	f.check(fmt.Sprintf("%s's answers during the outage: degraded ones allowed cost", r), degAllowed > 0,
		fmt.Sprintf("%d of %d answers degraded, %d cost allowed degraded", deg, n, degAllowed), "> 0")
	f.check(fmt.Sprintf("%s: cost allowed without a flag during the outage ≤ quota leases held at the kill", r), float64(leaseAllowed) <= leases,
		fmt.Sprintf("%d ≤ %.0f (%d processes × max(rate lease cap %.1f, %g × quota × share %.3f ÷ processes = %.1f, cost %d))",
			leaseAllowed, leases, spec.Processes, rateCap, cfg.QuotaAccuracy, share, quotaCap, dearest), "≤ leases")
	f.check(fmt.Sprintf("%s: every answer from %.1f s (kill + LeaseTTL %v + 1 s) to the restart flagged degraded", r, strictFrom.Seconds(), cfg.LeaseTTL),
		strictN > 0 && strictNotDeg == 0,
		fmt.Sprintf("%d of %d not degraded", strictNotDeg, strictN), "0 (of > 0)")
	after := lastDeg - q.back
	f.check(r+"'s last degraded answer after its Redis answered again", lastDeg > 0 && after <= regainedWithin,
		fmt.Sprintf("%.3f s", after.Seconds()), fmt.Sprintf("≤ %v", regainedWithin))
}

// plots draws the key's cumulative admitted cost, in all and by region,
// against the quota and the quota plus the bound.
func (q *quotaRun) plots(rec *Record) []Plot {
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"}
	series := rec.Series(q.key)
	n := len(series[""])
	cum := func(cells []Cell) []float64 {
		out := make([]float64, len(cells))
		sum := 0.0
		for i, cl := range cells {
			sum += float64(cl.Allowed)
			out[i] = sum
		}
		return out
	}
	flat := func(v float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	lines := []svgSeries{
		{Name: "all regions", Color: "#000", Points: cum(series[""])},
		{Name: "quota", Color: "#d62728", Dashed: true, Points: flat(float64(q.limit))},
		{Name: "quota + bound", Color: "#7f7f7f", Dashed: true, Points: flat(float64(q.limit) + q.bound)},
	}
	for i, r := range q.c.Regions() {
		lines = append(lines, svgSeries{Name: r, Color: colors[i%len(colors)], Points: cum(series[r])})
	}
	bands := [][2]float64{{q.kill.Seconds(), math.Min(q.restart.Seconds(), float64(n-1))}}
	return []Plot{{
		Title: fmt.Sprintf("%s: cumulative admitted cost of the key vs its monthly quota (%s's Redis down in the band)", quotaScenario, quotaDownRegion),
		File:  quotaScenario + "-admitted.svg",
		SVG:   svgPlot(fmt.Sprintf("%s: cumulative admitted cost", quotaScenario), "cost", lines, bands),
	}}
}

// phaseNotes splits the admitted cost by phase of the run (before the
// kill, during the outage, after the restart), the down region's apart,
// and reports the degraded rejections of the down region: a degraded
// answer carries no quota fields, so these are its quota rejections while
// its store was away (its degraded bucket refills at twice its demand).
func (q *quotaRun) phaseNotes(evs []Observed) {
	r := quotaDownRegion
	var all, down [3]int64
	var degRejected int
	firstDegRejected, lastAfter := time.Duration(-1), time.Duration(0)
	for _, e := range evs {
		if e.Region == r && e.Allowed && e.Start >= q.restart {
			lastAfter = max(lastAfter, e.End)
		}
		ph := 1
		switch {
		case e.Start < q.kill:
			ph = 0
		case e.Start >= q.restart:
			ph = 2
		}
		if e.Allowed {
			all[ph] += e.Cost
			if e.Region == r {
				down[ph] += e.Cost
			}
		}
		if e.Region == r && e.Degraded && !e.Allowed && e.Start >= q.kill && e.End <= q.restart {
			degRejected++
			if firstDegRejected < 0 || e.End < firstDegRejected {
				firstDegRejected = e.End
			}
		}
	}
	q.note("admitted cost by phase (requests sent before the kill / during the outage / after the restart): all regions %d / %d / %d, of which %s %d / %d / %d",
		all[0], all[1], all[2], r, down[0], down[1], down[2])
	if down[2] > 0 {
		q.note("after the restart %s allowed %d cost, the last answered at %.2f s (%.2f s after its Redis answered again)",
			r, down[2], lastAfter.Seconds(), (lastAfter - q.back).Seconds())
	}
	if degRejected > 0 {
		q.note("%s rejected %d checks degraded during the outage, the first answered at %.1f s (degraded answers carry no quota fields)",
			r, degRejected, firstDegRejected.Seconds())
	}
}

// counterNotes reports each region's monthly quota counter as its Redis
// holds it at the end: c (spent and leased in the period), the base's
// total b and region part br, and the base's age.
func (q *quotaRun) counterNotes() {
	var parts []string
	for _, r := range q.c.Regions() {
		rd := q.c.Region(r).Redis
		names, err := rd.Do("KEYS", "*{"+q.key+"}:q:month:*")
		if err != nil || names == "" {
			parts = append(parts, fmt.Sprintf("%s (none: %v)", r, err))
			continue
		}
		name := strings.Split(names, "\n")[0]
		h, err := rd.Do("HGETALL", name)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s (%v)", r, err))
			continue
		}
		fs := strings.Split(h, "\n")
		m := map[string]string{}
		for i := 0; i+1 < len(fs); i += 2 {
			m[fs[i]] = fs[i+1]
		}
		age := "no base"
		if us, err := strconv.ParseInt(m["bt"], 10, 64); err == nil && us > 0 {
			age = fmt.Sprintf("base %.1f s old", time.Since(time.UnixMicro(us)).Seconds())
		}
		parts = append(parts, fmt.Sprintf("%s c %s, b %s, br %s (%s)", r, m["c"], m["b"], m["br"], age))
	}
	q.note("monthly quota counters at the end of the run (Redis hash fields): %s", strings.Join(parts, "; "))
}

// boundTerms notes the terms of the bound docs/design.md [quotas] states,
// for this run, beside the measured over-admission (the check is the
// target's, in runQuotaExhaustion): (a) stale bases, each region's share
// of the other regions' traffic over the ledger's lag (the limiter's flush
// interval, the report interval and the reconciler's batch) plus the age
// of its base (at most a second near the end, or the time it takes the
// region to add two leases); (b) the down region's usage not yet in the
// ledger when its store lost its state; (c) (Σ s_r − 1) × (L − B), with
// each region's largest sampled share and B = 0 (a fresh key). Shares are
// sampled from /debug/shares every 500 ms.
func (q *quotaRun) boundTerms(rec *Record, admitted float64) {
	spec := q.c.Spec()
	cfg := region.DefaultConfig()
	procs := float64(spec.Processes)
	samples := rec.Samples(q.key)
	L := float64(q.limit)
	lag := participant.DefaultOptions().Limiter.FlushInterval + spec.ReportInterval + reconcilerBatchInterval
	var a, sumShares float64
	var shares []string
	for _, r := range spec.Regions {
		s := maxShare(samples, r, 0, q.form.run, spec.Weights[r])
		sumShares += s
		shares = append(shares, fmt.Sprintf("%s %.3f", r, s))
		own := q.form.offered * spec.Weights[r]
		lease := math.Max(cfg.AccuracyBudget*q.plan.Rate*s*cfg.AccuracyHorizon.Seconds()/procs, cfg.QuotaAccuracy*L*s/procs)
		age := math.Max(1, math.Max(cfg.QuotaAccuracy*L, 2*lease)/own)
		a += s * (q.form.offered - own) * (lag.Seconds() + age)
	}
	b := q.form.offered * spec.Weights[quotaDownRegion] * lag.Seconds()
	c := math.Max(0, sumShares-1) * L
	q.note("the bound's terms (docs/design.md [quotas]): (a) stale bases %.0f + (b) %s's unreported usage %.0f (%v of its %.0f cost/s) + (c) (Σ largest shares %.3f − 1) × quota %.0f = %.0f; admitted %.0f over the quota; largest shares %s",
		a, quotaDownRegion, b, lag, q.form.offered*spec.Weights[quotaDownRegion], sumShares, c, a+b+c, admitted-L, strings.Join(shares, ", "))
}
