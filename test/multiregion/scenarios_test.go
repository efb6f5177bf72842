package multiregion

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// scenarios is the failure table, in the order it runs.
var scenarios = []scenario{
	{
		name:    "steady",
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
	},
	{
		name: "demand-shift",
		traffic: func(s *scenarioRun) Traffic {
			half := s.D / 2
			return Traffic{Keys: s.zipf(), RegionDemand: func(el time.Duration) map[string]float64 {
				if el < half {
					return map[string]float64{"eu": 0.7, "us": 0.2, "ap": 0.1}
				}
				return map[string]float64{"eu": 0.1, "us": 0.2, "ap": 0.7}
			}}
		},
		setup: func(s *scenarioRun) {
			s.note("demand moves from eu 70 %% / us 20 %% / ap 10 %% to eu 10 %% / us 20 %% / ap 70 %% at %v", s.D/2)
		},
	},
	redisKilled("eu"),
	{
		name:    "redis-slow",
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
		act: func(s *scenarioRun, g *Generator) {
			g.At(s.D / 3)
			from := g.Elapsed()
			slow := 2 * s.c.Spec().StoreTimeout
			s.c.SlowRedis("us", slow)
			g.At(s.D/3 + s.F)
			to := g.Elapsed()
			s.c.SlowRedis("us", 0)
			s.faults = append(s.faults, Fault{Name: fmt.Sprintf("us Redis slowed by %v", slow), Region: "us", From: from, To: to})
			s.note("us's Redis round trip +%v (store timeout %v) from %.1f s to %.1f s", slow, s.c.Spec().StoreTimeout, from.Seconds(), to.Seconds())
		},
		check: func(s *scenarioRun, rec *Record, f *Figures) {
			f.check("degraded decisions flagged while slow", f.DegradedCost > 0,
				fmt.Sprintf("%d cost allowed degraded", f.DegradedCost), "> 0")
		},
	},
	{
		name:    "nats-partitioned",
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
		act: func(s *scenarioRun, g *Generator) {
			g.At(s.D / 3)
			from := g.Elapsed()
			s.c.PartitionNATS("ap")
			g.At(s.D/3 + s.F)
			s.c.HealNATS("ap")
			s.note("ap's NATS gateways cut from %.1f s to %.1f s (healed and reconnected at %.1f s)", from.Seconds(), (s.D/3 + s.F).Seconds(), g.Elapsed().Seconds())
		},
	},
	{
		name:    "postgres-down",
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
		act: func(s *scenarioRun, g *Generator) {
			g.At(s.D / 3)
			from := g.Elapsed()
			s.c.StopPostgres()
			g.At(s.D/3 + s.F)
			s.c.StartPostgres()
			s.note("Postgres stopped (immediate) from %.1f s to %.1f s", from.Seconds(), g.Elapsed().Seconds())
		},
	},
	{
		name:    "process-crash",
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
		act: func(s *scenarioRun, g *Generator) {
			g.At(s.D / 2)
			n := s.c.CrashProcess("eu", 0)
			s.crashed[n.ID()] = true
			s.note("eu/0 (%s) SIGKILLed at %.1f s while holding leases", n.ID(), g.Elapsed().Seconds())
		},
		check: func(s *scenarioRun, rec *Record, f *Figures) {
			l := f.Ledger
			f.check("crashed process: ledger ≤ what clients saw it allow", l.CrashedLedger <= l.CrashedClient,
				fmt.Sprintf("ledger %d, clients %d (unreported tail %d)", l.CrashedLedger, l.CrashedClient, l.CrashedClient-l.CrashedLedger), "≤")
			// Its windows never get a final report: once the (shortened)
			// grace passes they are listed as incomplete.
			var got map[string]int
			deadline := time.Now().Add(s.c.Spec().Window + 20*time.Second)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				inc, err := s.c.IncompleteProcesses(ctx, s.prefix)
				cancel()
				got = inc
				ok := err == nil
				for id := range s.crashed {
					ok = ok && inc[id] > 0
				}
				if ok || time.Now().After(deadline) {
					break
				}
				time.Sleep(500 * time.Millisecond) // poll interval of a deadline-bounded wait
			}
			ids := ""
			n := 0
			for id := range s.crashed {
				ids += id + " "
				n += got[id]
			}
			f.check("crashed process's windows flagged incomplete", n > 0,
				fmt.Sprintf("%d of its (key, window) rows in usage_incomplete_windows: %s(ledger grace shortened to 3 s)", n, ids), "> 0")
		},
		after: func(s *scenarioRun) { s.c.RestartProcess(s.c.Node("eu", 0), 0) },
	},
	{
		name: "clock-skew",
		skip: func(s *scenarioRun) string {
			if !hasFlag(s.t, "clock-skew") {
				return "the regional-limiter has no --clock-skew flag yet (asked of the lead)"
			}
			return ""
		},
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
		setup: func(s *scenarioRun) {
			s.c.SkewClock(s.c.Node("eu", 1), 500*time.Millisecond)
			s.c.SkewClock(s.c.Node("us", 0), -500*time.Millisecond)
			s.note("eu/1 runs with its wall clock +500 ms, us/0 with −500 ms")
		},
		after: func(s *scenarioRun) {
			s.c.RestartProcess(s.c.Node("eu", 1), 0)
			s.c.RestartProcess(s.c.Node("us", 0), 0)
		},
	},
	{
		name: "plan-change",
		traffic: func(s *scenarioRun) Traffic {
			ks := s.zipf()
			for _, k := range ks[:5] {
				s.plans[k.Key] = []PlanPhase{{Rate: defaultRate, Capacity: defaultCapacity}}
			}
			return Traffic{Keys: ks}
		},
		setup: func(s *scenarioRun) {
			plan := s.prefix + "plan"
			s.c.SetPlan(plan, defaultRate, defaultCapacity)
			for i := 0; i < 5; i++ {
				s.c.AssignKey(fmt.Sprintf("%sk-%d", s.prefix, i), plan)
			}
		},
		act: func(s *scenarioRun, g *Generator) {
			g.At(s.D / 2)
			plan := s.prefix + "plan"
			s.c.SetPlan(plan, defaultRate/2.5, defaultCapacity/2.5)
			at := g.Elapsed()
			var keys []string
			for i := 0; i < 5; i++ {
				k := fmt.Sprintf("%sk-%d", s.prefix, i)
				keys = append(keys, k)
				s.plans[k] = append(s.plans[k], PlanPhase{From: at, Rate: defaultRate / 2.5, Capacity: defaultCapacity / 2.5})
			}
			s.c.WaitPlan(20*time.Second, defaultRate/2.5, defaultCapacity/2.5, keys...)
			s.note("plan %s lowered from %v/s (capacity %v) to %v/s (capacity %v) at %.1f s; every process had it %d ms later",
				plan, defaultRate, defaultCapacity, defaultRate/2.5, defaultCapacity/2.5, at.Seconds(), (g.Elapsed() - at).Milliseconds())
		},
	},
	{
		name: "hot-key",
		traffic: func(s *scenarioRun) Traffic {
			ks := s.zipf()
			hot := HotKey(s.prefix+"hot", 100, ks)
			s.plans[hot.Key] = []PlanPhase{{Rate: hotRate, Capacity: hotCapacity}}
			s.watch = hot.Key
			s.note("hot key demands %.0f cost/s (100 × the mean of the others) on a plan of %v/s", hot.Rate, hotRate)
			return Traffic{Keys: append([]KeyLoad{hot}, ks...)}
		},
		setup: func(s *scenarioRun) { s.c.AssignKey(s.watch, "hot") },
	},
	{
		name: "burst-idle-key",
		traffic: func(s *scenarioRun) Traffic {
			ks := s.zipf()
			small, big := s.prefix+"idle-small", s.prefix+"idle-big"
			for _, k := range []string{small, big} {
				s.plans[k] = []PlanPhase{{Rate: defaultRate, Capacity: defaultCapacity}}
			}
			s.watch = big
			share := s.c.Spec().Weights["eu"]
			return Traffic{Keys: ks, Bursts: []Burst{
				{Key: small, Region: "eu", At: s.D / 2, Over: time.Second, Cost: 0.8 * share * defaultCapacity},
				{Key: big, Region: "eu", At: s.D / 2, Over: time.Second, Cost: 10 * defaultCapacity},
			}}
		},
		setup: func(s *scenarioRun) {
			s.note("at %v two idle keys burst from eu within 1 s: %s asks 80 %% of eu's share of capacity (all should pass), %s asks 10 × capacity", s.D/2, s.prefix+"idle-small", s.prefix+"idle-big")
		},
		check: func(s *scenarioRun, rec *Record, f *Figures) {
			var rej, dem int64
			for _, c := range rec.Series(s.prefix + "idle-small")[""] {
				rej += c.Rejected
				dem += c.Rejected + c.Allowed
			}
			f.check("burst within eu's share of capacity admitted in full", rej == 0 && dem > 0,
				fmt.Sprintf("%d of %d cost rejected", rej, dem), "0 rejected")
		},
	},
	hostileGossip(),
	// Last: it restarts every limiter (coldstart_test.go).
	coldStart(),
}

// rollingRestartDelay is the limiters' --shutdown-delay in the rolling
// restart: well above the balancer's health check interval (100 ms), so
// that the balancer has taken a draining limiter out before its HTTP server
// closes.
const rollingRestartDelay = time.Second

// TestRollingRestart restarts every limiter, one at a time, under steady
// load, on a cluster of its own whose limiters drain for rollingRestartDelay
// on SIGTERM: the generator's balancer must find each drain on /readyz by
// itself, and no call may fail. In the full form the same run with
// --shutdown-delay 0 (no drain) shows that the check can fail. Run one with
// -run 'TestRollingRestart/<name>'.
func TestRollingRestart(t *testing.T) {
	mode := requireMode(t)
	for _, v := range []struct {
		delay time.Duration
		sc    scenario
	}{
		{rollingRestartDelay, rollingRestart("rolling-restart", "")},
		{0, rollingRestart("rolling-restart-no-drain", "--shutdown-delay 0s, no drain")},
	} {
		t.Run(v.sc.name, func(t *testing.T) {
			if v.sc.counterfactual != "" && mode != ModeFull {
				t.Skip("the counterfactual runs in the full form only: its own cluster costs about a minute")
			}
			spec := scenarioSpec(mode)
			spec.ShutdownDelay = v.delay
			runScenario(t, startScenarioCluster(t, spec), mode, v.sc)
		})
	}
}

// rollingRestartPhases are the rolling restart's warm-up before the first
// SIGTERM and the traffic's tail after the last limiter is ready again, and
// the bound of the whole run.
func rollingRestartPhases(m Mode) (warm, tail, bound time.Duration) {
	if m == ModeFull {
		return 30 * time.Second, 30 * time.Second, 3 * time.Minute
	}
	return 4 * time.Second, 4 * time.Second, time.Minute
}

// rollingRestart restarts every limiter of every region in turn under
// steady Zipf traffic (RollingRestart, region by region), then lets the
// traffic run for a tail and stops it. The run has no fault: the usual
// accuracy and ledger checks apply, and no call may fail, unless
// counterfactual says what the run leaves out.
func rollingRestart(name, counterfactual string) scenario {
	return scenario{
		name:           name,
		counterfactual: counterfactual,
		run: func(m Mode) time.Duration {
			_, _, bound := rollingRestartPhases(m)
			return bound
		},
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
		setup:   func(s *scenarioRun) { s.skipLatency = true },
		act: func(s *scenarioRun, g *Generator) {
			warm, tail, _ := rollingRestartPhases(s.mode)
			g.At(warm)
			from := g.Elapsed()
			for _, r := range s.c.Regions() {
				s.restarts = append(s.restarts, s.c.RollingRestart(r)...)
			}
			to := g.Elapsed()
			g.At(to + tail)
			g.Stop()
			var turns []string
			for _, r := range s.restarts {
				turn := fmt.Sprintf("%s (%s → %s) exited %.2f s after SIGTERM, ready %.2f s after", r.Node, r.From, r.To, r.Exited.Seconds(), r.Ready.Seconds())
				if r.ExitErr != "" {
					turn += " (exit: " + r.ExitErr + ")"
				}
				turns = append(turns, turn)
			}
			s.note("limiters run with --shutdown-delay %v; the clients' balancer checks each limiter's /readyz every 100 ms and sends only to those answering 200. "+
				"Rolling restart of all %d limiters from %.1f s to %.1f s, one at a time, each SIGTERMed without being taken out of the balancer first: %s",
				s.c.Spec().ShutdownDelay, len(s.restarts), from.Seconds(), to.Seconds(), strings.Join(turns, "; "))
		},
		check: func(s *scenarioRun, rec *Record, f *Figures) {
			allowed := rec.AllowedByProcess()
			served := 0
			for _, r := range s.restarts {
				if len(allowed[r.To]) > 0 {
					served++
				}
			}
			nodes := len(s.c.Nodes())
			f.check("restarted limiters that served checks again", served == nodes && len(s.restarts) == nodes,
				fmt.Sprintf("%d of %d (%d restarted)", served, nodes, len(s.restarts)), "all")
			if s.counterfactual == "" {
				return
			}
			_, _, first := rec.Failures()
			kinds := map[string]int{}
			for _, fl := range first {
				kind := "other"
				for _, k := range []string{"connection refused", "connection reset", "EOF"} {
					if strings.Contains(fl.Err, k) {
						kind = k
						break
					}
				}
				kinds[kind] += fl.Checks
			}
			var parts []string
			for _, k := range sortedKeys(kinds) {
				parts = append(parts, fmt.Sprintf("%s %d", k, kinds[k]))
			}
			s.note("without a drain, failed checks by error (of the first %d failures recorded): %s. A call whose connection closed under it after the daemon had read it is in the ledger but not in the clients' count.",
				len(first), strings.Join(parts, ", "))
		},
	}
}

// redisKilled kills region's redis-server for a fault's length and starts
// it again empty: the region's processes decide degraded, each decision
// flagged, and are back on their store within 2 s; a closed-policy key is
// rejected there and served elsewhere (closedKeyChecks).
func redisKilled(region string) scenario {
	return scenario{
		name:    "redis-killed",
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: append(s.zipf(), s.closedLoad())} },
		act: func(s *scenarioRun, g *Generator) {
			g.At(s.D / 3)
			from := g.Elapsed()
			s.c.KillRedis(region)
			g.At(s.D/3 + s.F)
			to := g.Elapsed()
			s.c.RestoreRedis(region)
			s.back = g.Elapsed() // the server answers again
			s.faults = append(s.faults, Fault{Name: region + " Redis killed", Region: region, From: from, To: to, StoreLost: true})
			s.note("%s's redis-server killed from %.1f s to %.1f s, restarted empty and answering at %.3f s", region, from.Seconds(), to.Seconds(), s.back.Seconds())
		},
		check: func(s *scenarioRun, rec *Record, f *Figures) {
			f.check("degraded decisions flagged during the outage", f.DegradedCost > 0,
				fmt.Sprintf("%d cost allowed degraded", f.DegradedCost), "> 0")
			// Every process of the region is back on the regional bucket
			// within 2 s: the background probe reconnects within
			// ProbeTimeout.
			after := rec.LastDegraded(region) - s.back
			f.check(region+"'s last degraded decision after its Redis answered again", after <= 2*time.Second,
				fmt.Sprintf("%.3f s", after.Seconds()), "≤ 2 s")
			s.closedKeyChecks(f)
		},
	}
}

// hostileGossip publishes, with us's limiter NATS credentials, what one
// compromised pod could (issues 28 and 37) for the middle third of the
// run: a goodbye for every us process after each of their digests, an
// invented process claiming float32's largest demand (and learned total)
// for two keys outside the traffic, a digest from a new process name every
// interval, and MaxProcesses invented processes claiming nothing (slot
// squatting) while eu's limiters restart one by one (a rollout: each new
// process hears the invented ones first); and, at the start of that third,
// the two hostile usage batches (Hostile.MonthsKey, OverflowKey) on keys
// outside the scenario's prefix, which the ledger check sums (every
// process's rows of every key with the prefix), a forged refund of the
// largest counter and a row whose window never ends, both on eu's busiest
// key. eu's limiters come back from the rollout with --usage-encoding
// json, and us then squats the message IDs of their next reports of the
// three busiest keys (SquatMessageIDs). The run's usual checks (admitted ≤
// 1.01 × limit, wrongly rejected ≤ 1 %, ledger = clients: ingestion went
// on, and eu's reports all landed) must hold: before bounded trust, eu and
// ap dropped us and split every limit between them while us kept
// enforcing its share; before crowded regions counted as claiming their
// maximum, the restarted eu processes refused the real us processes,
// counted us at zero demand and took 1 − floor of every key; before the
// ingestion bounds, the months batch stalled ingestion for ever and the
// overflow batch broke every key's export of the month; before issue 37's
// fixes the refund took the key's bill to zero, the open row kept its
// month open for ever and the squats made eu's reports duplicates,
// dropped.
func hostileGossip() scenario {
	var (
		stop    func() int
		h       Hostile
		eu      []*Node
		sq      IDSquat
		sqErr   error
		rollout time.Duration
	)
	return scenario{
		name:    "hostile-gossip",
		traffic: func(s *scenarioRun) Traffic { return Traffic{Keys: s.zipf()} },
		// It restarts eu's processes (the rollout): p99 is reported, not
		// held to the bound, as in the rolling restart.
		setup: func(s *scenarioRun) { s.skipLatency = true },
		act: func(s *scenarioRun, g *Generator) {
			g.At(s.D / 3)
			from := g.Elapsed()
			h = Hostile{Region: "us", Goodbyes: true, OneShots: true, Squat: true,
				Claims:      []string{s.prefix + "hostile-a", s.prefix + "hostile-b"},
				MonthsKey:   "hostile-batch-" + s.prefix + "months",
				OverflowKey: "hostile-batch-" + s.prefix + "overflow",
				RefundKey:   s.watch, ForeverKey: s.watch}
			stop = s.c.StartHostile(h)
			g.At(s.D/3 + s.F/5)
			// A rollout, one process at a time; clients route around each
			// from the start, as this scenario is about gossip, not drains.
			rollout = g.Elapsed()
			eu = s.c.Region("eu").Nodes()
			for _, n := range eu {
				s.c.SetFlags(n, "--usage-encoding", ledger.EncodingJSON)
				s.c.RestartProcess(n, 0)
			}
			rolled := g.Elapsed()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			sq, sqErr = s.c.SquatMessageIDs(ctx, "us", eu, squatKeys(s), squatAhead)
			cancel()
			squatted := g.Elapsed()
			g.At(s.D/3 + s.F)
			sent := stop()
			stop = nil
			s.note("us's limiter credentials published %d forged goodbyes, absurd claims, one-shot digests, squatting digests, two usage batches and two forged reports from %.1f s to %.1f s; "+
				"eu's %d limiters restarted one by one (with --usage-encoding json) from %.1f s to %.1f s; us squatted their next message IDs from %.1f s to %.1f s",
				sent, from.Seconds(), g.Elapsed().Seconds(), len(eu), rollout.Seconds(), rolled.Seconds(), rolled.Seconds(), squatted.Seconds())
		},
		check: func(s *scenarioRun, rec *Record, f *Figures) {
			rows := hostileBatchChecks(s, h, f)
			began := time.Now()
			slotSquatChecks(s, rec, f, rollout)
			forgedChecks(s, h, f, rows, sq, sqErr)
			s.note("the slot-squatting, forged-report and id-squatting checks took %.2f s", time.Since(began).Seconds())
		},
		after: func(s *scenarioRun) {
			if stop != nil { // the run ended early
				stop()
				stop = nil
			}
			// The next restart (cold-start's) runs eu on the cluster's
			// encoding again.
			for _, n := range eu {
				s.c.SetFlags(n)
			}
		},
	}
}

// squatAhead is how many of each victim row's next reports (and of the
// next window's first) SquatMessageIDs squats: a 10 s window reported
// every second has about 11.
const squatAhead = 12

// squatKeys are the keys whose message IDs hostile-gossip squats: the three
// busiest.
func squatKeys(s *scenarioRun) []string {
	return []string{s.prefix + "k-0", s.prefix + "k-1", s.prefix + "k-2"}
}

// slotSquatChecks reports, from the rollout (when the squatted eu
// processes start) to the end of the run, the worst key's admitted cost
// over its bound (rate × time + capacity), and the largest sum of the
// regions' own shares of the watched key: with the old slot cap, eu 0.95
// + us 0.50 = 1.45 of the bound.
func slotSquatChecks(s *scenarioRun, rec *Record, f *Figures, from time.Duration) {
	secs := rec.Seconds()
	a, b := int(from/time.Second), secs-1
	worst, worstKey, worstAdm, worstLim := 0.0, "", 0.0, 0.0
	for key, phases := range s.plans {
		adm := admittedOver(rec, key, time.Duration(a)*time.Second, time.Duration(b)*time.Second)
		lim := limitOver(phases, a, b, f.Duration.Seconds())
		if r := adm / lim; r > worst || worstKey == "" {
			worst, worstKey, worstAdm, worstLim = r, key, adm, lim
		}
	}
	var during []ShareSample
	for _, sm := range rec.Samples(s.watch) {
		if sm.At >= from {
			during = append(during, sm)
		}
	}
	f.check("slot squatting: admitted / bound from the rollout on, worst key", worstKey != "" && worst <= 1.0,
		fmt.Sprintf("%.3f (%s: %.0f of %.0f, seconds %d to %d); largest Σ of the regions' own shares of %s: %.3f",
			worst, worstKey, worstAdm, worstLim, a, b, s.watch, largestShareSum(during)), "≤ 1.0")
}

// forgedChecks waits (up to 30 s) until the ledger has dead-lettered h's
// forged reports and sq's squats, then asserts each refusal: the refund cut
// to what us's rows of the key net over the refund horizon
// (refund_exceeds_spent) and the watched key's export row (of rows) net
// of that refund alone; the open-for-ever row
// refused (long_window), none in the ledger; every squat dead-lettered
// (invalid for the report IDs, subject for those namespaced for eu's
// subjects) and none a duplicate. That eu's reports all landed is the
// run's ledger check.
func forgedChecks(s *scenarioRun, h Hostile, f *Figures, rows []export.Row, sq IDSquat, sqErr error) {
	var (
		o   ForgedOutcome
		err error
	)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		o, err = s.c.ReadForged(ctx, h)
		cancel()
		d := o.DeadLetters
		if err == nil && d[string(reconcile.ReasonRefundExceeds)] > 0 && d[string(reconcile.ReasonLongWindow)] > 0 &&
			d[string(reconcile.ReasonInvalid)]+d[string(reconcile.ReasonSubject)] >= sq.Predictable+sq.Namespaced-sq.Duplicates ||
			time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond) // poll interval of a deadline-bounded wait
	}
	if err != nil {
		f.check("forged reports read", false, err.Error(), "read")
		return
	}
	d := o.DeadLetters
	var victim export.Row
	for _, r := range rows {
		if r.Key == h.RefundKey {
			victim = r
		}
	}
	// us serves the key too: the refund keeps at most what us's own rows
	// of it net over the refund horizon, never eu's spend.
	f.check("forged refund of 2^53−1: cut to the forging region's net and dead-lettered",
		d[string(reconcile.ReasonRefundExceeds)] == 1 && o.RefundRows == 1 && o.Refunded <= o.RegionNet &&
			victim.Refunded == o.Refunded && victim.Net == victim.Allowed-victim.Refunded && victim.Allowed > 0 && victim.Net >= 0,
		fmt.Sprintf("refund_exceeds_spent %d; its row refunds %d of us's net %d; export of %s: allowed %d, refunded %d, net %d, billed %d",
			d[string(reconcile.ReasonRefundExceeds)], o.Refunded, o.RegionNet, h.RefundKey, victim.Allowed, victim.Refunded, victim.Net, victim.Billed),
		"1 letter, refunded ≤ us's net, net = allowed − refunded ≥ 0")
	f.check("open-for-ever row (window_end "+HostileForever.Format(time.DateOnly)+") refused", d[string(reconcile.ReasonLongWindow)] == 1 && o.LongRows == 0,
		fmt.Sprintf("long_window %d; rows longer than %v in the ledger: %d", d[string(reconcile.ReasonLongWindow)], reconcile.MaxWindow, o.LongRows),
		"1 letter, 0 rows")
	got := fmt.Sprintf("%d squats under eu's report IDs (%d dead-lettered invalid), %d under IDs namespaced for eu's subjects (%d dead-lettered subject), %d taken for duplicates; victims %s",
		sq.Predictable, d[string(reconcile.ReasonInvalid)], sq.Namespaced, d[string(reconcile.ReasonSubject)], sq.Duplicates, strings.Join(sq.Victims, ", "))
	if sqErr != nil {
		got = sqErr.Error()
	}
	f.check("message-id squatting (eu on --usage-encoding json): every squat refused", sqErr == nil && sq.Predictable > 0 && sq.Duplicates == 0 &&
		d[string(reconcile.ReasonInvalid)] == sq.Predictable && d[string(reconcile.ReasonSubject)] == sq.Namespaced, got, "all, no duplicate")
}

// hostileBatchChecks waits (up to a minute) until the ledger has written
// or dead-lettered every report of h's usage batches, then asserts that
// the overflow key is flagged and that the current month still exports
// for every key, and returns its rows.
func hostileBatchChecks(s *scenarioRun, h Hostile, f *Figures) []export.Row {
	var (
		o   HostileBatchOutcome
		err error
	)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		o, err = s.c.ReadHostileBatches(ctx, h)
		cancel()
		if err == nil && o.Accounted() >= 2*HostileBatchReports && o.Overflow || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond) // poll interval of a deadline-bounded wait
	}
	var dead []string
	for _, r := range sortedKeys(o.DeadLetters) {
		dead = append(dead, fmt.Sprintf("%s %d", r, o.DeadLetters[r]))
	}
	got := fmt.Sprintf("%d of %d (months key: %d rows written; overflow key: %d rows written; dead letters: %s)",
		o.Accounted(), 2*HostileBatchReports, o.MonthsRows, o.OverflowRows, strings.Join(dead, ", "))
	if err != nil {
		got = err.Error()
	}
	s.note("hostile usage batches on %s: %s", HostileBatchSubject(h.Region), got)
	f.check("hostile batches' reports written or dead-lettered", err == nil && o.Accounted() == 2*HostileBatchReports, got, "all")
	f.check("months batch: at most the accepted months written", err == nil && o.MonthsRows <= 4,
		fmt.Sprintf("%d months written, %d too_old, %d future", o.MonthsRows, o.DeadLetters["too_old"], o.DeadLetters["future"]), "≤ 4 (max report age 93 days)")
	f.check("overflow key flagged in usage_windows", err == nil && o.Overflow && o.OverflowRows == HostileBatchReports,
		fmt.Sprintf("overflow %v over %d rows at %d", o.Overflow, o.OverflowRows, int64(reconcile.MaxCounter)), "true")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	rows, err := s.c.ExportMonth(ctx)
	cancel()
	var saturated bool
	for _, r := range rows {
		if r.Key == h.OverflowKey {
			saturated = r.Allowed == math.MaxInt64 && !r.Complete
		}
	}
	got = fmt.Sprintf("%d rows, overflow key's allowed saturated and incomplete: %v", len(rows), saturated)
	if err != nil {
		got = err.Error()
	}
	f.check("current month's export over every key", err == nil && saturated && len(rows) > 1, got, "succeeds")
	return rows
}
