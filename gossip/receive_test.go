package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/limit"
)

// manualFleet is nodes that Run on real NATS and one manual clock: step
// ticks them all and waits until each holds every other's new digest, so a
// test knows exactly which digests the next tick computes from.
type manualFleet struct {
	t     *testing.T
	clock *clock.Manual
	nodes []*Node
}

func startManualFleet(t *testing.T, url string, regions []string, names ...[2]string) *manualFleet {
	return startManualFleetWith(t, url, regions, nil, names...)
}

// startManualFleetWith is startManualFleet with mod applied to every
// node's config after the fleet's own settings.
func startManualFleetWith(t *testing.T, url string, regions []string, mod func(*Config), names ...[2]string) *manualFleet {
	f := &manualFleet{t: t, clock: clock.NewManual(time.Unix(1_700_000_000, 0))}
	for _, rp := range names {
		f.nodes = append(f.nodes, startNode(t, url, regions, rp[0], rp[1], func(c *Config) {
			c.Clock = f.clock
			c.TrustRamp = c.Interval // trust demand at once
			if mod != nil {
				mod(c)
			}
		}))
	}
	return f
}

// step records rate cost units per second of demand for key at each node
// (by index) and ticks every node once.
func (f *manualFleet) step(key string, rates ...float64) {
	f.t.Helper()
	for i, n := range f.nodes {
		n.Record([]limit.Usage{{Key: key, Spent: int64(rates[i] * testInterval.Seconds())}})
	}
	f.clock.BlockUntil(len(f.nodes)) // every Run waits for its next tick
	f.clock.Advance(testInterval)
	f.clock.BlockUntil(len(f.nodes)) // every Run has ticked and published
	e := f.nodes[0].epoch(f.clock.Now())
	testserver.WaitFor(f.t, 5*time.Second, time.Millisecond, func() error {
		for _, to := range f.nodes {
			for _, from := range f.nodes {
				to.mu.Lock()
				p := to.peers[peerID{from.cfg.Region, from.cfg.Process}]
				ok := p != nil && p.cur != nil && p.cur.Epoch == e
				to.mu.Unlock()
				if !ok {
					return fmt.Errorf("%s/%s has no digest of epoch %d from %s/%s", to.cfg.Region, to.cfg.Process, e, from.cfg.Region, from.cfg.Process)
				}
			}
		}
		return nil
	})
}

// TestDigestsBoundToTheirSender: digests on real NATS that name another
// region or process than their subject's, goodbyes for another process, and
// digests of a region outside the configured set are counted and change no
// share; the unknown region does not freeze shares either.
func TestDigestsBoundToTheirSender(t *testing.T) {
	srv := testserver.StartNATS(t)
	f := startManualFleet(t, srv.URL, euUS, [2]string{"eu", "p1"}, [2]string{"us", "p1"})
	eu, us := f.nodes[0], f.nodes[1]
	for i := 0; i < 5; i++ {
		f.step("k", 700, 300)
	}
	want := map[*Node]float64{eu: 0.7, us: 0.3}
	for n, w := range want {
		if s := n.Snapshot(); s.Frozen || !near(n.Share("k"), w, 0.01) {
			t.Fatalf("%s before the forgeries: frozen=%v share %v, want %v", n.cfg.Region, s.Frozen, n.Share("k"), w)
		}
	}

	// Each forged digest is of the epoch just published, with a huge
	// demand: stored, it would be used at the next tick.
	e := eu.epoch(f.clock.Now())
	huge := []KeyDemand{{Key: "k", Demand: 1e6, Admitted: 1e6}}
	forgeries := []struct {
		name    string
		subject string
		d       Digest
		reason  string
	}{
		{"us/p1 on eu/p1's subject", "quota.gossip.eu.p1", Digest{Region: "us", Process: "p1", Epoch: e, Keys: huge}, "subject_mismatch"},
		{"eu/p2 on eu/p1's subject", "quota.gossip.eu.p1", Digest{Region: "eu", Process: "p2", Epoch: e, Keys: huge}, "subject_mismatch"},
		{"eu/p1 on a subject without process", "quota.gossip.eu", Digest{Region: "eu", Process: "p1", Epoch: e, Keys: huge}, "subject_mismatch"},
		{"eu/p1 on a subject with a token too many", "quota.gossip.eu.p1.x", Digest{Region: "eu", Process: "p1", Epoch: e, Keys: huge}, "subject_mismatch"},
		{"goodbye for eu/p1 from eu/p2", "quota.gossip.eu.p2", Digest{Region: "eu", Process: "p1", Epoch: e, Goodbye: true}, "subject_mismatch"},
		{"goodbye for us/p1 from eu/p1", "quota.gossip.eu.p1", Digest{Region: "us", Process: "p1", Epoch: e, Goodbye: true}, "subject_mismatch"},
		{"unknown region", "quota.gossip.mars.p1", Digest{Region: "mars", Process: "p1", Epoch: e, Keys: huge}, "unknown_region"},
		{"goodbye of an unknown region", "quota.gossip.mars.p2", Digest{Region: "mars", Process: "p2", Epoch: e, Goodbye: true}, "unknown_region"},
	}
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	wantRejected := map[string]uint64{}
	for _, fg := range forgeries {
		b, _, err := fg.d.encode(nil, MaxDigestSize)
		if err != nil {
			t.Fatalf("%s: %v", fg.name, err)
		}
		if err := nc.Publish(fg.subject, b); err != nil {
			t.Fatal(err)
		}
		wantRejected[fg.reason]++
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every node has refused every forgery (so it has handled them all).
	testserver.WaitFor(t, 5*time.Second, time.Millisecond, func() error {
		for _, n := range f.nodes {
			got := n.Snapshot().RejectedDigests
			for reason, w := range wantRejected {
				if got[reason] != w {
					return fmt.Errorf("%s: rejected %v, want %v", n.cfg.Region, got, wantRejected)
				}
			}
		}
		return nil
	})

	for i := 0; i < 2*DefaultConfig().StaleAfter; i++ {
		f.step("k", 700, 300)
		for n, w := range want {
			s := n.Snapshot()
			if s.Frozen || len(s.Default) != 2 || !near(n.Share("k"), w, 0.01) {
				t.Fatalf("tick %d after the forgeries: %s frozen=%v regions=%v share %v, want %v",
					i, n.cfg.Region, s.Frozen, s.Default, n.Share("k"), w)
			}
			for _, r := range s.Regions {
				if r.Name == "mars" || r.Processes != 1 {
					t.Fatalf("tick %d: %s sees %+v", i, n.cfg.Region, s.Regions)
				}
			}
		}
	}
	if bad := eu.Snapshot().BadDigests; bad != 0 {
		t.Fatalf("forgeries counted as malformed: %d", bad)
	}

	// Control: the same digest on its own subject is taken, so the refusals
	// above are what kept the shares still. (Only NATS permissions stop a
	// client from publishing on another process's subject.)
	control := Digest{Region: "us", Process: "p1", Epoch: e + uint64(2*DefaultConfig().StaleAfter), Keys: huge}
	b, _, _ := control.encode(nil, MaxDigestSize)
	if err := nc.Publish("quota.gossip.us.p1", b); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 5*time.Second, time.Millisecond, func() error {
		eu.mu.Lock()
		defer eu.mu.Unlock()
		if p := eu.peers[peerID{"us", "p1"}]; p == nil || p.cur == nil || len(p.cur.Keys) == 0 || p.cur.Keys[0].Demand < 1e5 {
			return fmt.Errorf("eu has not taken the control digest")
		}
		return nil
	})
	f.clock.BlockUntil(len(f.nodes))
	f.clock.Advance(testInterval)
	f.clock.BlockUntil(len(f.nodes))
	if got := eu.Share("k"); got > 0.1 {
		t.Fatalf("eu's share %v after the control digest, want the floor", got)
	}
}
