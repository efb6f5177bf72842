package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/limit"
)

// stepHeardOrRefused is manualFleet.step for a fleet under attack: it waits
// until every node has, for every other node, either its digest of the new
// epoch or one more process refused for want of room than before the step,
// so that a node which refuses a real process does not hang the test.
func (f *manualFleet) stepHeardOrRefused(key string, rates ...float64) {
	f.t.Helper()
	refused := make([]uint64, len(f.nodes))
	for i, n := range f.nodes {
		n.mu.Lock()
		refused[i] = n.rejected[rejectProcesses]
		n.mu.Unlock()
		n.Record([]limit.Usage{{Key: key, Spent: int64(rates[i] * testInterval.Seconds())}})
	}
	f.clock.BlockUntil(len(f.nodes))
	f.clock.Advance(testInterval)
	f.clock.BlockUntil(len(f.nodes))
	e := f.nodes[0].epoch(f.clock.Now())
	testserver.WaitFor(f.t, 5*time.Second, time.Millisecond, func() error {
		for i, to := range f.nodes {
			to.mu.Lock()
			held := 0
			for _, from := range f.nodes {
				if p := to.peers[peerID{from.cfg.Region, from.cfg.Process}]; p != nil && p.cur != nil && p.cur.Epoch == e {
					held++
				}
			}
			more := int(to.rejected[rejectProcesses] - refused[i])
			to.mu.Unlock()
			if held+more < len(f.nodes) {
				return fmt.Errorf("%s/%s holds %d digests of epoch %d and refused %d more processes, of %d nodes", to.cfg.Region, to.cfg.Process, held, e, more, len(f.nodes))
			}
		}
		return nil
	})
}

// TestSlotSquattingKeepsTheGlobalBound (issue 37, item 1): a holder of us's
// credentials publishes MaxProcesses invented us processes claiming
// nothing, every tick; an eu process that starts afterwards (a rollout)
// hears them before the real us process. Whatever fills its us slots, the
// regions never enforce more than the key's limit together, neither while
// the forger publishes nor after it stops; and once it has stopped, the
// invented processes age out: the new eu process counts the real us
// process and the shares return to the demand split.
func TestSlotSquattingKeepsTheGlobalBound(t *testing.T) {
	for _, tt := range []struct {
		name string
		ramp time.Duration // Config.TrustRamp; 0 is the default
	}{
		{"trusted at once", testInterval},
		{"default ramp", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := testserver.StartNATS(t)
			mod := func(c *Config) {
				c.Rate = func(string) float64 { return 1000 }
				c.TrustRamp = tt.ramp
			}
			f := startManualFleetWith(t, srv.URL, euUS, mod, [2]string{"eu", "p1"}, [2]string{"us", "p1"})
			for i := 0; i < 5; i++ {
				f.step("k", 500, 500)
			}
			h := newHostile(t, srv.URL)
			squat := func() {
				e := f.nodes[0].epoch(f.clock.Now())
				for i := 0; i < DefaultConfig().MaxProcesses; i++ {
					h.publish(Digest{Region: "us", Process: fmt.Sprintf("squat%03d", i), Epoch: e})
				}
				h.fence("us", f.nodes...)
			}
			squat()
			// The rollout: a new eu process starts while the forger is at
			// work, and hears the invented processes first.
			late := startNode(t, srv.URL, euUS, "eu", "p2", func(c *Config) {
				c.Clock = f.clock
				mod(c)
			})
			f.nodes = append(f.nodes, late)
			h = newHostile(t, srv.URL) // fences counted from late's start
			squat()

			const attack, after = 10, 15
			worstDuring, worstAfter := 0.0, 0.0
			for i := 0; i < attack+after; i++ {
				f.stepHeardOrRefused("k", 250, 500, 250)
				sum := enforced("k", f.nodes...)
				t.Logf("tick %2d (forger %s): eu/p1 %.3f eu/p2 %.3f us/p1 %.3f, admitted share of the bound %.3f", i,
					map[bool]string{true: "on", false: "off"}[i < attack], f.nodes[0].Share("k"), late.Share("k"), f.nodes[1].Share("k"), sum)
				// Invented names never evict a process that publishes.
				f.nodes[0].mu.Lock()
				_, kept := f.nodes[0].peers[peerID{"us", "p1"}]
				f.nodes[0].mu.Unlock()
				if !kept {
					t.Fatalf("tick %d: eu/p1 evicted us/p1, which publishes every tick", i)
				}
				if i < attack {
					worstDuring = max(worstDuring, sum)
					squat()
				} else {
					worstAfter = max(worstAfter, sum)
				}
			}
			t.Logf("fleet's admitted share of the bound (sum of enforced shares): worst %.3f while the forger publishes, %.3f after it stops", worstDuring, worstAfter)
			if worstDuring > 1+1e-6 || worstAfter > 1+1e-6 {
				t.Fatalf("the regions enforce up to %.3f of the limit while squatted, %.3f after: want ≤ 1", worstDuring, worstAfter)
			}
			if s := late.Snapshot(); s.RejectedDigests["too_many_processes"] == 0 || s.EvictedProcesses == 0 {
				t.Errorf("eu/p2 refused %d and evicted %d processes: the squat did not fill its us slots",
					s.RejectedDigests["too_many_processes"], s.EvictedProcesses)
			}
			// The invented processes aged out: every node counts the real
			// us process, computes (not frozen), and is back at the demand
			// split.
			for _, n := range f.nodes {
				s := n.Snapshot()
				var us RegionStatus
				for _, r := range s.Regions {
					if r.Name == "us" {
						us = r
					}
				}
				n.mu.Lock()
				_, real := n.peers[peerID{"us", "p1"}]
				n.mu.Unlock()
				if !real || us.Processes != 1 || us.Crowded || s.Frozen {
					t.Errorf("%s/%s after the forger stopped: counts us/p1 %v, us processes %d, crowded %v, frozen %v", n.cfg.Region, n.cfg.Process, real, us.Processes, us.Crowded, s.Frozen)
				}
				if got := n.Shares("k")["eu"]; !near(got, 0.5, 0.05) {
					t.Errorf("%s/%s: eu's share of k %.3f after the forger stopped, want the demand split 0.5", n.cfg.Region, n.cfg.Process, got)
				}
			}
		})
	}
}

// TestRoomOnlyFromProcessesThatMissedAnEpoch: a new process of a full region
// takes the slot of the process heard least recently only if that one
// missed the whole last epoch by the receiver's clock, whatever epoch the
// newcomer's digest claims; either way the region is crowded, and the
// receiver's own process is never evicted.
func TestRoomOnlyFromProcessesThatMissedAnEpoch(t *testing.T) {
	tests := []struct {
		name        string
		region      string // of the processes that fill the slots and of the newcomer
		latest      uint64 // epochs before the receiver's of the held process heard least recently
		kept        bool   // the newcomer is stored
		evictedName string // the process it replaces, if any
	}{
		{"held process published this epoch", "us", 0, false, ""},
		{"held process missed only the current epoch so far", "us", 1, false, ""},
		{"held process missed the last epoch", "us", 2, true, "b"},
		{"own region: this process is never evicted", "eu", 2, true, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls := newLockstep(t, func(c *Config) {
				c.Regions = []string{"eu", "us"}
				c.MaxProcesses = 2
			}, [2]string{"eu", "p1"})
			n := ls.nodes[0]
			now := ls.now
			e := n.epoch(now)
			if tt.region == "eu" {
				// This process holds a slot of its own region; b fills the other.
				n.tick(now)
				n.store(&Digest{Region: "eu", Process: "b", Epoch: e - tt.latest}, now)
			} else {
				n.store(&Digest{Region: "us", Process: "a", Epoch: e}, now)
				n.store(&Digest{Region: "us", Process: "b", Epoch: e - tt.latest}, now)
			}
			// The newcomer dates its digest one epoch ahead, the most refuse allows.
			_, refused := n.store(&Digest{Region: tt.region, Process: "c", Epoch: e + 1}, now)
			n.mu.Lock()
			_, kept := n.peers[peerID{tt.region, "c"}]
			_, b := n.peers[peerID{tt.region, "b"}]
			_, self := n.peers[peerID{"eu", "p1"}]
			_, crowded := n.crowded[tt.region]
			evicted := n.evicted
			n.mu.Unlock()
			if kept != tt.kept || refused == tt.kept {
				t.Fatalf("newcomer kept %v (refused %v), want kept %v", kept, refused, tt.kept)
			}
			if wantB := tt.evictedName != "b"; b != wantB || (evicted == 1) != !wantB {
				t.Fatalf("b held %v, %d evicted; want b held %v", b, evicted, wantB)
			}
			if !crowded {
				t.Fatalf("region %s not crowded after a newcomer found it full", tt.region)
			}
			if tt.region == "eu" && !self {
				t.Fatal("this process was evicted from its own region")
			}
		})
	}
}
