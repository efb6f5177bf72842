package multiregion

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/gossip"
)

// Hostile is what a holder of one region's limiter NATS credentials
// publishes during a scenario (issue 28): every limiter pod of a region
// shares them, so one compromised pod may publish any gossip digest or
// goodbye on quota.gossip.<region>.<any process>. Every gossip interval,
// a fifth of an interval after the boundary (after the real digests of
// that epoch), it publishes what its fields ask.
type Hostile struct {
	// Region is the region whose limiter credentials are used.
	Region string
	// Goodbyes publishes a goodbye for each of the region's processes:
	// without bounded trust the other regions drop the region while it
	// still enforces its share.
	Goodbyes bool
	// Claims lists keys for which an invented process ("hostile-claims")
	// claims float32's largest demand and admitted cost, with the largest
	// key age: without bounds it pins every other region at its floor.
	Claims []string
	// OneShots publishes one digest from a new, never-repeated process name
	// (claiming Claims' keys at 1 cost unit/s): without bounded trust each
	// counts as missing at the next tick and freezes every region's shares.
	OneShots bool
}

// StartHostile connects with h.Region's limiter credentials and publishes
// h until the returned stop is called; stop waits for the publisher to end
// and returns how many messages it published.
func (c *Cluster) StartHostile(h Hostile) (stop func() int) {
	c.t.Helper()
	c.Region(h.Region)
	user := clientUser(h.Region, false)
	nc, err := nats.Connect(c.nats.URL(h.Region), nats.UserInfo(user, c.nats.Password(user)), nats.Timeout(5*time.Second))
	if err != nil {
		c.t.Fatalf("multiregion: hostile %s: connect as %s: %v", h.Region, user, err)
	}
	iv := c.spec.GossipInterval
	done, quit := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	sent := 0 // guarded by mu
	go func() {
		defer close(done)
		for shot := 0; ; shot++ {
			now := time.Now()
			next := now.Truncate(iv).Add(iv + iv/5)
			timer := time.NewTimer(next.Sub(now))
			select {
			case <-quit:
				timer.Stop()
				return
			case <-timer.C:
			}
			n, err := c.hostileRound(nc, h, shot)
			if err != nil {
				c.t.Logf("multiregion: hostile %s: %v", h.Region, err)
			}
			mu.Lock()
			sent += n
			mu.Unlock()
		}
	}()
	return func() int {
		close(quit)
		<-done
		nc.Close()
		mu.Lock()
		defer mu.Unlock()
		return sent
	}
}

// hostileRound publishes one interval's messages of h and returns how many.
func (c *Cluster) hostileRound(nc *nats.Conn, h Hostile, shot int) (int, error) {
	iv := c.spec.GossipInterval
	now := time.Now()
	epoch := uint64((now.UnixNano() + int64(iv)/2) / int64(iv))
	var out []gossip.Digest
	if h.Goodbyes {
		for _, n := range c.Region(h.Region).Nodes() {
			out = append(out, gossip.Digest{Region: h.Region, Process: gossipName(n.ID()), Epoch: epoch, Goodbye: true})
		}
	}
	claims := func(rate float64, age uint64) []gossip.KeyDemand {
		ks := make([]gossip.KeyDemand, 0, len(h.Claims))
		for _, k := range h.Claims {
			ks = append(ks, gossip.KeyDemand{Key: k, Demand: rate, Admitted: rate, Age: age})
		}
		return ks
	}
	if len(h.Claims) > 0 {
		huge := math.MaxFloat32
		out = append(out, gossip.Digest{Region: h.Region, Process: "hostile-claims", Epoch: epoch,
			Demand: huge, Admitted: huge, Learned: huge, Keys: claims(huge, gossip.MaxKeyAge)})
	}
	if h.OneShots {
		out = append(out, gossip.Digest{Region: h.Region, Process: fmt.Sprintf("hostile-once-%d", shot), Epoch: epoch,
			Demand: 1, Admitted: 1, Keys: claims(1, 0)})
	}
	for i, d := range out {
		b, err := d.MarshalBinary()
		if err != nil {
			return i, err
		}
		if err := nc.Publish("quota.gossip."+d.Region+"."+d.Process, b); err != nil {
			return i, err
		}
	}
	return len(out), nc.Flush()
}

// gossipName is a process id as gossip names it (a NATS subject token),
// as the participant makes it.
func gossipName(id string) string {
	return strings.NewReplacer(".", "_", "*", "_", ">", "_", " ", "_").Replace(id)
}
