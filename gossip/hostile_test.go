package gossip

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/internal/testserver"
)

// hostile publishes what a holder of one region's limiter NATS credentials
// may: any digest or goodbye on <Subject>.<region>.<any process>. Every
// test below is an attack from issue 28 on real NATS against real nodes
// that Run (a manualFleet), each failing on the code before bounded trust.
type hostile struct {
	t       *testing.T
	nc      *nats.Conn
	barrier int // malformed digests published, to fence the others
}

func newHostile(t *testing.T, url string) *hostile {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &hostile{t: t, nc: nc}
}

// publish sends d on its own process's subject.
func (h *hostile) publish(d Digest) {
	h.t.Helper()
	b, kept, err := d.encode(nil, MaxDigestSize)
	if err != nil || kept != len(d.Keys) {
		h.t.Fatalf("encode %s/%s: %d of %d keys, %v", d.Region, d.Process, kept, len(d.Keys), err)
	}
	if err := h.nc.Publish("quota.gossip."+d.Region+"."+d.Process, b); err != nil {
		h.t.Fatal(err)
	}
}

// fence returns once every node has handled everything published so far:
// it publishes a malformed digest (messages of one connection arrive in
// order) and waits until every node has counted it.
func (h *hostile) fence(region string, nodes ...*Node) {
	h.t.Helper()
	if err := h.nc.Publish("quota.gossip."+region+".fence", []byte("not a digest")); err != nil {
		h.t.Fatal(err)
	}
	h.barrier++
	testserver.WaitFor(h.t, 30*time.Second, time.Millisecond, func() error {
		for _, n := range nodes {
			if got := n.Snapshot().BadDigests; got < uint64(h.barrier) {
				return fmt.Errorf("%s/%s has handled %d of %d fences", n.cfg.Region, n.cfg.Process, got, h.barrier)
			}
		}
		return nil
	})
}

// enforced is the sum over regions of the largest share any process of the
// region enforces for key: more than 1 breaks the global bound.
func enforced(key string, nodes ...*Node) float64 {
	most := map[string]float64{}
	for _, n := range nodes {
		most[n.cfg.Region] = max(most[n.cfg.Region], n.Share(key))
	}
	var sum float64
	for _, s := range most {
		sum += s
	}
	return sum
}

// rateOf is a Config.Rate that gives every key the same rate.
func rateOf(r float64) func(*Config) {
	return func(c *Config) { c.Rate = func(string) float64 { return r } }
}

// TestForgedGoodbyesKeepTheGlobalBound (issue 28, item 1): a goodbye
// published for each us process after each of its real digests does not
// make the other region drop us while us still enforces its share: the
// shares the regions enforce never sum to more than 1.
func TestForgedGoodbyesKeepTheGlobalBound(t *testing.T) {
	srv := testserver.StartNATS(t)
	f := startManualFleet(t, srv.URL, euUS, [2]string{"eu", "p1"}, [2]string{"us", "p1"}, [2]string{"us", "p2"})
	for i := 0; i < 5; i++ {
		f.step("k", 600, 200, 200)
	}
	h := newHostile(t, srv.URL)
	for i := 0; i < 10; i++ {
		e := f.nodes[0].epoch(f.clock.Now())
		for _, p := range []string{"p1", "p2"} {
			h.publish(Digest{Region: "us", Process: p, Epoch: e, Goodbye: true})
		}
		h.fence("us", f.nodes...)
		f.step("k", 600, 200, 200)
		if sum := enforced("k", f.nodes...); sum > 1+1e-6 {
			t.Fatalf("round %d: the regions enforce %.4f of the limit (eu %v, us %v/%v)", i, sum,
				f.nodes[0].Share("k"), f.nodes[1].Share("k"), f.nodes[2].Share("k"))
		}
		for _, n := range f.nodes {
			if s := n.Snapshot(); s.RejectedDigests["conflicting_digest"] != 0 {
				t.Fatalf("round %d: %s/%s counts %d conflicting digests in an honest fleet (its own echo?)", i, n.cfg.Region, n.cfg.Process, s.RejectedDigests["conflicting_digest"])
			}
			if s := n.Snapshot(); s.Frozen || len(s.Default) != 2 || !near(n.Shares("k")["eu"], 0.6, 0.02) {
				t.Fatalf("round %d: %s/%s frozen=%v regions=%v shares %v, want eu 0.6", i, n.cfg.Region, n.cfg.Process, s.Frozen, s.Default, n.Shares("k"))
			}
		}
	}
}

// TestHugeClaimIsBounded (issue 28, item 6): an invented us process that
// claims float32's largest rate for a key (trusted at once here, so that
// the claim cap alone is tested) does not pin eu at its floor although eu
// has 90 % of the real demand: us's claims count up to MaxClaim × the
// key's rate. Its float32-max learned total does not take eu's default
// share either.
func TestHugeClaimIsBounded(t *testing.T) {
	srv := testserver.StartNATS(t)
	const rate = 1000.0
	f := startManualFleetWith(t, srv.URL, euUS, rateOf(rate), [2]string{"eu", "p1"}, [2]string{"us", "p1"})
	eu := f.nodes[0]
	for i := 0; i < 5; i++ {
		f.step("k", 900, 100)
	}
	h := newHostile(t, srv.URL)
	huge := math.MaxFloat32
	// eu's 900 against us's 100 + the capped claim (MaxClaim × rate).
	want := 900 / (900 + DefaultConfig().MaxClaim*rate)
	for i := 0; i < 8; i++ {
		e := eu.epoch(f.clock.Now())
		h.publish(Digest{Region: "us", Process: "evil", Epoch: e, Demand: huge, Admitted: huge, Learned: huge,
			Keys: []KeyDemand{{Key: "k", Demand: huge, Admitted: huge, Age: MaxKeyAge}}})
		h.fence("us", f.nodes...)
		f.step("k", 900, 100)
		if got := eu.Share("k"); got < want-0.02 {
			t.Fatalf("round %d: eu's share %v with 90 %% of the real demand, want ≥ %.3f (floor %v)", i, got, want, eu.cfg.Floor)
		}
		if sum := enforced("k", f.nodes...); sum > 1+1e-6 {
			t.Fatalf("round %d: the regions enforce %.4f of the limit", i, sum)
		}
		// The invented process's learned total is float32's largest too:
		// the learned weights stay within WeightBand of the configured
		// (equal) ones, so eu keeps half of its default share.
		if got, least := eu.Shares("never-seen")["eu"], 0.5/DefaultConfig().WeightBand; got < least-1e-6 {
			t.Fatalf("round %d: eu's default share %v, want ≥ %v", i, got, least)
		}
	}
	// The hot-key list counts claims as the shares do: us's demand for k
	// is at most its real 100 plus one capped claim.
	hot := eu.HotKeys("us", 1)
	if len(hot.Keys) != 1 || hot.Keys[0].Key != "k" || hot.Keys[0].Demand > 100+DefaultConfig().MaxClaim*rate+1 {
		t.Fatalf("us's hottest key: %+v, want k at ≤ %v", hot.Keys, 100+DefaultConfig().MaxClaim*rate)
	}
}

// TestSelfReportedAgeDoesNotSkipTheRamp (issue 28, item 6): a digest of an
// invented process that says its key has been published for MaxKeyAge
// epochs is trusted only as far as the receiver has itself heard the
// process: the key's shares ramp over TrustRamp as for any new key.
func TestSelfReportedAgeDoesNotSkipTheRamp(t *testing.T) {
	srv := testserver.StartNATS(t)
	const ramp = 10
	f := startManualFleetWith(t, srv.URL, euUS, func(c *Config) {
		c.TrustRamp = ramp * c.Interval
		c.Rate = func(string) float64 { return 1000 }
	}, [2]string{"eu", "p1"}, [2]string{"us", "p1"})
	for i := 0; i < ramp+2; i++ {
		f.step("old", 500, 500)
	}
	h := newHostile(t, srv.URL)
	var first float64
	for i := 0; i < ramp+2; i++ {
		e := f.nodes[0].epoch(f.clock.Now())
		h.publish(Digest{Region: "us", Process: "evil", Epoch: e, Demand: 1000, Admitted: 1000,
			Keys: []KeyDemand{{Key: "new", Demand: 1000, Admitted: 1000, Age: MaxKeyAge}}})
		h.fence("us", f.nodes...)
		f.step("old", 500, 500)
		us := f.nodes[1].Share("new")
		if i == 0 {
			first = us
			// Equal weights: a new key starts near 0.5 and ramps.
			if us > 0.6 {
				t.Fatalf("first tick of the claim: us's share of the new key %v, want ≤ 0.6 (the ramp is not skipped)", us)
			}
		}
		if sum := enforced("new", f.nodes...); sum > 1+1e-6 {
			t.Fatalf("round %d: the regions enforce %.4f of the limit", i, sum)
		}
	}
	// The ramp ends: trusted in full, the claim takes its share.
	if got := f.nodes[1].Share("new"); got < 0.9 {
		t.Fatalf("after %d ticks of the claim, us's share %v (first %v), want ≥ 0.9: the ramp must end", ramp+2, got, first)
	}
}

// TestInventedKeysAndProcessesStayWithinCaps (issue 28, item 6): 200
// invented us processes of 4,000 keys each leave at most MaxProcesses
// processes of us and MaxRegionKeys keys of us in every node's table, and
// what was refused is counted; the shares stay within the limit and return
// to the demand split once us is no longer crowded.
func TestInventedKeysAndProcessesStayWithinCaps(t *testing.T) {
	srv := testserver.StartNATS(t)
	f := startManualFleet(t, srv.URL, euUS, [2]string{"eu", "p1"}, [2]string{"us", "p1"})
	for i := 0; i < 3; i++ {
		f.step("k", 500, 500)
	}
	h := newHostile(t, srv.URL)
	const procs, perProc = 200, 4000
	e := f.nodes[0].epoch(f.clock.Now())
	for p := 0; p < procs; p++ {
		keys := make([]KeyDemand, perProc)
		for j := range keys {
			keys[j] = KeyDemand{Key: "x" + strconv.FormatInt(int64(p*perProc+j), 36), Demand: 1e6, Admitted: 1e6}
		}
		h.publish(Digest{Region: "us", Process: fmt.Sprintf("evil%03d", p), Epoch: e, Keys: keys})
	}
	h.fence("us", f.nodes...)
	f.step("k", 500, 500)
	f.step("k", 500, 500)
	cfg := DefaultConfig()
	for _, n := range f.nodes {
		s := n.Snapshot()
		if len(s.Keys) > cfg.MaxRegionKeys+1 {
			t.Errorf("%s: %d keys in the share table, want ≤ %d + 1", n.cfg.Region, len(s.Keys), cfg.MaxRegionKeys)
		}
		for _, r := range s.Regions {
			if r.Processes > cfg.MaxProcesses {
				t.Errorf("%s keeps %d processes of %s, want ≤ %d", n.cfg.Region, r.Processes, r.Name, cfg.MaxProcesses)
			}
		}
		if got, want := s.RejectedDigests["too_many_processes"], uint64(procs-(cfg.MaxProcesses-1)); got != want {
			t.Errorf("%s: rejected %d digests for too many processes, want %d", n.cfg.Region, got, want)
		}
		if got, want := s.DroppedKeys["process_cap"], uint64((cfg.MaxProcesses-1)*(perProc-cfg.MaxKeys)); got != want {
			t.Errorf("%s: dropped %d keys over MaxKeys, want %d", n.cfg.Region, got, want)
		}
		// us counts its own region's one-shot processes as nothing (a
		// digest and the one before it, ownView); eu caps them.
		if n.cfg.Region == "eu" && s.DroppedKeys["region_cap"] == 0 {
			t.Errorf("%s: no keys dropped over MaxRegionKeys", n.cfg.Region)
		}
		if sum := enforced("k", f.nodes...); sum > 1+1e-6 {
			t.Errorf("the regions enforce %.4f of the limit while us is crowded", sum)
		}
	}
	// Refused processes crowd us for a while (eu counts it as claiming its
	// maximum, room.go); then eu is back at the demand split.
	for i := uint64(0); i <= cfg.crowdTicks(); i++ {
		f.step("k", 500, 500)
	}
	for _, n := range f.nodes {
		if !near(n.Shares("k")["eu"], 0.5, 0.02) {
			t.Errorf("%s: shares of k %v, want eu 0.5", n.cfg.Region, n.Shares("k"))
		}
	}
}

// TestOneShotProcessesNeverFreeze (issue 28, item 7): one digest per tick
// from a new, never-repeated us process name never freezes shares, whether
// processes are trusted at once or after the default ramp.
func TestOneShotProcessesNeverFreeze(t *testing.T) {
	for _, tt := range []struct {
		name string
		ramp time.Duration // Config.TrustRamp; 0 is the default
	}{
		{"trusted at once", testInterval},
		{"default ramp", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := testserver.StartNATS(t)
			f := startManualFleetWith(t, srv.URL, euUS, func(c *Config) { c.TrustRamp = tt.ramp },
				[2]string{"eu", "p1"}, [2]string{"us", "p1"})
			for i := 0; i < 5; i++ {
				f.step("k", 700, 300)
			}
			h := newHostile(t, srv.URL)
			frozen := 0
			const ticks = 15
			for i := 0; i < ticks; i++ {
				e := f.nodes[0].epoch(f.clock.Now())
				h.publish(Digest{Region: "us", Process: fmt.Sprintf("once%d", i), Epoch: e,
					Keys: []KeyDemand{{Key: "k", Demand: 100, Admitted: 100}}})
				h.fence("us", f.nodes...)
				f.step("k", 700, 300)
				for _, n := range f.nodes {
					if n.Snapshot().Frozen {
						frozen++
						break
					}
				}
			}
			if frozen > 0 {
				t.Fatalf("shares frozen on %d of %d ticks", frozen, ticks)
			}
		})
	}
}

// TestBadDigestLogThrottledAndKeyFree (issue 28, item 10): a flood of
// malformed digests is counted in full but logged at most once a minute,
// with the count, and no key of a digest reaches the log.
func TestBadDigestLogThrottledAndKeyFree(t *testing.T) {
	srv := testserver.StartNATS(t)
	var logs testserver.LogBuffer
	f := startManualFleetWith(t, srv.URL, []string{"eu"}, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}, [2]string{"eu", "p1"})
	n := f.nodes[0]
	// A digest whose only fault is a repeated key: its error names the key
	// unless the decoder keeps keys out of errors.
	d := Digest{Region: "eu", Process: "p2", Epoch: 1, Keys: []KeyDemand{{Key: "secret-customer-key", Demand: 1}, {Key: "secret-customer-key", Demand: 1}}}
	b := appendString(append([]byte("QG"), DigestVersion, 0), d.Region)
	b = appendString(b, d.Process)
	b = append(b, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2)
	for range 2 {
		b = appendString(b, "secret-customer-key")
		b = appendRate(b, 1)
		b = appendRate(b, 1)
		b = append(b, 0)
	}
	if _, err := DecodeDigest(b); err == nil {
		t.Fatal("the repeated-key digest decodes")
	}
	h := newHostile(t, srv.URL)
	const flood = 100
	for i := 0; i < flood; i++ {
		if err := h.nc.Publish("quota.gossip.eu.p2", b); err != nil {
			t.Fatal(err)
		}
	}
	h.barrier = flood // fence waits for these and its own
	h.fence("eu", n)
	out := logs.String()
	if got := strings.Count(out, "bad gossip digest"); got != 1 {
		t.Fatalf("%d log lines for %d bad digests, want 1:\n%s", got, flood+1, out)
	}
	if strings.Contains(out, "secret-customer-key") {
		t.Fatalf("a key reached the log:\n%s", out)
	}
	// A minute later, the next bad digest is logged with the count since.
	f.clock.Advance(badLogEvery)
	h.fence("eu", n)
	out = logs.String()
	if got := strings.Count(out, "bad gossip digest"); got != 2 || !strings.Contains(out, "count=101") {
		t.Fatalf("after a minute: %d lines, want 2, the second with count=101:\n%s", got, out)
	}
}

// TestStraddledDigests: digests of an invented us process that reach us's
// node just before each tick and eu's just after (a sender timing them at
// the boundary), alternating an absurd claim with none. With
// Config.StrictOwnView they do not make the regions' own shares sum above
// 1: us counts its own processes by the least of their last two digests
// (ownView), never more than the digest eu holds. Without it (the
// default) they do, for the ticks they straddle: the residual risk that
// Config.StrictOwnView documents. Lockstep, to place each arrival exactly.
func TestStraddledDigests(t *testing.T) {
	for _, c := range []struct {
		strict bool
		// within: the regions enforce at most the limit; otherwise the
		// timing lifts them above it, the residual risk Config.StrictOwnView
		// documents.
		within bool
	}{{strict: true, within: true}, {strict: false, within: false}} {
		t.Run(fmt.Sprintf("StrictOwnView=%v", c.strict), func(t *testing.T) {
			ls := newLockstep(t, func(cfg *Config) { rateOf(1000)(cfg); cfg.StrictOwnView = c.strict },
				[2]string{"eu", "p1"}, [2]string{"us", "p1"})
			eu, us := ls.nodes[0], ls.nodes[1]
			for i := 0; i < 10; i++ {
				ls.step("k", []float64{500, 500}, nil)
			}
			iv := DefaultConfig().Interval
			worst := 0.0
			for i := 0; i < 10; i++ {
				e := eu.epoch(ls.now)
				d := &Digest{Region: "us", Process: "evil", Epoch: e}
				if e%2 == 0 {
					d.Keys = []KeyDemand{{Key: "k", Demand: 1e6, Admitted: 1e6}}
				}
				us.store(d, ls.now.Add(iv-time.Millisecond))
				ls.step("k", []float64{500, 500}, nil)
				eu.store(d, ls.now.Add(time.Millisecond))
				worst = max(worst, enforced("k", eu, us))
			}
			if within := worst <= 1+1e-6; within != c.within {
				t.Fatalf("the regions enforced up to %.4f of the limit; want within the limit: %v", worst, c.within)
			}
			t.Logf("the regions enforced up to %.4f of the limit", worst)
		})
	}
}

// TestForgedDigestOfARealProcessIsMerged: a second digest for a real us
// process and epoch, claiming nothing, reaches every node after the real
// one. Taken as is (the last one wins), eu would count us at nothing and
// take the limit while us/p1 counts its real demand; merged, eu keeps the
// greater claims and us the lesser, so the regions enforce at most 1, and
// the forgery is counted.
func TestForgedDigestOfARealProcessIsMerged(t *testing.T) {
	ls := newLockstep(t, nil, [2]string{"eu", "p1"}, [2]string{"us", "p1"})
	eu, us := ls.nodes[0], ls.nodes[1]
	for i := 0; i < 10; i++ {
		ls.step("k", []float64{500, 500}, nil)
	}
	worst := 0.0
	for i := 0; i < 5; i++ {
		forged := Digest{Region: "us", Process: "p1", Epoch: eu.epoch(ls.now)}
		b, err := forged.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ls.nodes { // as NATS delivers it, us/p1 included
			n.receive("quota.gossip.us.p1", b)
		}
		ls.step("k", []float64{500, 500}, nil)
		worst = max(worst, enforced("k", eu, us))
	}
	if worst > 1+1e-6 {
		t.Fatalf("the regions enforced up to %.4f of the limit", worst)
	}
	if got := eu.Snapshot().RejectedDigests["conflicting_digest"]; got != 5 {
		t.Fatalf("eu counted %d conflicting digests, want 5", got)
	}
}
