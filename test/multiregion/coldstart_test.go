package multiregion

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The cold-start scenario: every limiter of every region starts at once,
// with no lease, no gossip and no memberlist, and traffic begins as soon as
// they answer /readyz, on keys nobody has seen, from regions whose demand
// is unlike the configured weights (--regions, --region-weights eu 0.5 /
// us 0.3 / ap 0.2, demand eu 10 % / us 20 % / ap 70 %) at three times the
// keys' rate. Over the run the fleet must admit, per key, at least 97 % and
// at most 101 % of its bound rate·T + capacity: the regions must hand the
// share the configured weights give eu, which it cannot use, over to ap
// quickly enough, without overshooting while they do.
const (
	coldStartKeys   = 3
	coldStartFactor = 3.0  // demand per key, × its rate
	coldStartFloor  = 0.97 // least admitted / bound, per key
)

// coldStartDemand is each region's fraction of the demand: unlike the
// spec's default weights (eu 0.5, us 0.3, ap 0.2).
var coldStartDemand = map[string]float64{"eu": 0.1, "us": 0.2, "ap": 0.7}

// coldStartRun is the run length T: the 60 s, in both forms. The
// bound's capacity term is two seconds of rate that the regions cannot all
// use (the share of it the configured weights put in eu and us is stranded
// there when their shares shrink to their demand), which weighs 9 % of a
// 20 s bound but 3 % of a 60 s one (a 20 s run admitted 0.946 of its
// bound, 60 s runs 0.982): a shorter short form would fail the floor for
// its length. It adds about 63 s to the short suite.
func coldStartRun(Mode) time.Duration { return 60 * time.Second }

func coldStart() scenario {
	return scenario{
		name: "cold-start",
		run:  coldStartRun,
		skip: func(s *scenarioRun) string {
			sp := s.c.Spec()
			for r := range coldStartDemand {
				if _, ok := sp.Weights[r]; !ok || len(sp.Regions) != len(coldStartDemand) {
					return fmt.Sprintf("the cold-start demand is for regions eu, us, ap; the cluster has %v", sp.Regions)
				}
			}
			return ""
		},
		traffic: func(s *scenarioRun) Traffic {
			keys := make([]KeyLoad, coldStartKeys)
			for i := range keys {
				keys[i] = KeyLoad{Key: fmt.Sprintf("%sk-%d", s.prefix, i), Rate: coldStartFactor * defaultRate}
				s.plans[keys[i].Key] = []PlanPhase{{Rate: defaultRate, Capacity: defaultCapacity}}
			}
			return Traffic{Keys: keys, RegionDemand: func(time.Duration) map[string]float64 { return coldStartDemand }}
		},
		setup: func(s *scenarioRun) {
			sp := s.c.Spec()
			s.launched = s.c.ColdRestart()
			s.note("every limiter of every region stopped and started again at once (new process ids, empty leases, gossip and memberlist; Redis, NATS and the catalogue kept); ready %.2f s after the launch",
				time.Since(s.launched).Seconds())
			s.note("%d keys on plan default (%v/s, capacity %v), each demanding %g × its rate, split eu %g %% / us %g %% / ap %g %% against --region-weights %s",
				coldStartKeys, defaultRate, defaultCapacity, coldStartFactor,
				100*coldStartDemand["eu"], 100*coldStartDemand["us"], 100*coldStartDemand["ap"], sp.weightsFlag())
		},
		act: func(s *scenarioRun, g *Generator) {
			s.note("traffic started %.2f s after the limiters were launched", g.start.Sub(s.launched).Seconds())
		},
		check: coldStartCheck,
	}
}

// coldStartCheck asserts, per key, fleet-wide admitted / (rate·T +
// capacity) within [coldStartFloor, 1.01], and notes the admitted cost by
// region and period of the run.
func coldStartCheck(s *scenarioRun, rec *Record, f *Figures) {
	end := f.Duration.Seconds()
	type ratio struct {
		key           string
		admitted, lim float64
	}
	var ratios []ratio
	var sumAdm, sumLim float64
	for _, k := range sortedKeys(s.plans) {
		series := rec.Series(k)[""]
		if len(series) == 0 {
			continue
		}
		adm := 0.0
		for _, c := range series {
			adm += float64(c.Allowed)
		}
		lim := limitOver(s.plans[k], 0, len(series)-1, end)
		ratios = append(ratios, ratio{k, adm, lim})
		sumAdm += adm
		sumLim += lim
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	var loKey, hiKey ratio
	var parts []string
	for _, r := range ratios {
		x := r.admitted / r.lim
		if x < lo {
			lo, loKey = x, r
		}
		if x > hi {
			hi, hiKey = x, r
		}
		parts = append(parts, fmt.Sprintf("%s %.0f / %.0f = %.4f", r.key, r.admitted, r.lim, x))
	}
	if len(ratios) == 0 {
		f.check("cold start: admitted / (rate·T + capacity), every key", false, "no key had traffic", "in [0.97, 1.01]")
		return
	}
	f.check(fmt.Sprintf("cold start: admitted / (rate·T + capacity), least key, T %.1f s", end), lo >= coldStartFloor,
		fmt.Sprintf("%.4f (%s: %.0f of %.0f)", lo, loKey.key, loKey.admitted, loKey.lim), fmt.Sprintf("≥ %.2f", coldStartFloor))
	f.check(fmt.Sprintf("cold start: admitted / (rate·T + capacity), worst key, T %.1f s", end), hi <= 1.01,
		fmt.Sprintf("%.4f (%s: %.0f of %.0f)", hi, hiKey.key, hiKey.admitted, hiKey.lim), "≤ 1.01")
	s.note("cold start, per key (admitted by the fleet / rate·T + capacity): %s; all keys %.0f / %.0f = %.4f",
		strings.Join(parts, "; "), sumAdm, sumLim, sumAdm/sumLim)
	s.note("cold start, admitted by region over time: %s", coldStartTimeline(s, rec))
}

// coldStartTimeline is the cold keys' admitted cost per period of the run,
// by region and in all, against rate × keys × period, with the watched
// key's shares at the period's end.
func coldStartTimeline(s *scenarioRun, rec *Record) string {
	regions := s.c.Regions()
	n := rec.Seconds()
	step := 2
	if n > 30 {
		step = 5
	}
	adm := map[string][]float64{}
	dem := map[string][]float64{}
	for _, r := range append([]string{""}, regions...) {
		adm[r] = make([]float64, n)
		dem[r] = make([]float64, n)
	}
	rate := 0.0
	for _, k := range sortedKeys(s.plans) {
		rate += s.plans[k][0].Rate
		for r, cells := range rec.Series(k) {
			for i, c := range cells {
				adm[r][i] += float64(c.Allowed)
				dem[r][i] += float64(c.Allowed + c.Rejected)
			}
		}
	}
	samples := rec.Samples(s.watch)
	shareAt := func(at time.Duration) map[string]float64 {
		var last map[string]float64
		for _, sm := range samples {
			if sm.At <= at {
				last = sm.Shares
			}
		}
		return last
	}
	var rows []string
	for a := 0; a < n; a += step {
		b := min(a+step, n)
		var cells []string
		for _, r := range regions {
			x, d := 0.0, 0.0
			for i := a; i < b; i++ {
				x += adm[r][i]
				d += dem[r][i]
			}
			cells = append(cells, fmt.Sprintf("%s %.0f/%.0f", r, x, d))
		}
		tot := 0.0
		for i := a; i < b; i++ {
			tot += adm[""][i]
		}
		row := fmt.Sprintf("[%d s, %d s): %s admitted/demanded; all %.0f of rate × T %.0f (%.2f)", a, b, strings.Join(cells, ", "), tot, rate*float64(b-a), tot/(rate*float64(b-a)))
		if sh := shareAt(time.Duration(b) * time.Second); sh != nil {
			var ss []string
			for _, r := range regions {
				ss = append(ss, fmt.Sprintf("%s %.3f", r, sh[r]))
			}
			row += fmt.Sprintf(", shares of %s %s", s.watch, strings.Join(ss, " "))
		}
		rows = append(rows, row)
	}
	return strings.Join(rows, "; ")
}
