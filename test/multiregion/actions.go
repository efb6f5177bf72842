package multiregion

import (
	"fmt"
	"sync"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// KillRedis kills the region's redis-server: the region's limiters see
// connection errors until RestoreRedis. Its data is lost (no persistence),
// as in a crash of an unreplicated cache.
func (c *Cluster) KillRedis(region string) {
	c.t.Helper()
	c.Region(region).Redis.Stop()
}

// RestoreRedis starts the region's redis-server again on the same address,
// empty.
func (c *Cluster) RestoreRedis(region string) {
	c.t.Helper()
	c.Region(region).Redis.Restart(c.t)
}

// SlowRedis adds d to the round trip of every call from the region's
// limiters to its Redis (d/2 each way); 0 removes it.
func (c *Cluster) SlowRedis(region string, d time.Duration) {
	c.t.Helper()
	if err := c.Region(region).RedisProxy.Latency(d / 2); err != nil {
		c.t.Fatal(err)
	}
}

// PartitionNATS cuts every NATS gateway link to and from region: its
// processes still reach their own NATS server (and hear each other), but no
// gossip, catalogue update or usage report crosses to or from the other
// regions until HealNATS. It returns when the other servers have noticed.
func (c *Cluster) PartitionNATS(region string) {
	c.t.Helper()
	c.Region(region)
	c.nats.cutRegion(region)
	c.mu.Lock()
	c.cutNATS[region] = true
	c.mu.Unlock()
	testserver.WaitFor(c.t, 15*time.Second, 20*time.Millisecond, func() error {
		for _, r := range c.order {
			var gz gatewayz
			if err := getJSON("http://"+c.nats.servers[r].monitor+"/gatewayz", &gz); err != nil {
				return err
			}
			for name, out := range gz.Outbound {
				if (r == region || name == region) && out.Connection != nil {
					return fmt.Errorf("gateway %s→%s still connected", r, name)
				}
			}
		}
		return nil
	})
}

// HealNATS reconnects region's gateways (with their latency) and waits
// until they are connected both ways.
func (c *Cluster) HealNATS(region string) {
	c.t.Helper()
	c.nats.heal(region)
	c.mu.Lock()
	delete(c.cutNATS, region)
	c.mu.Unlock()
	testserver.WaitFor(c.t, 30*time.Second, 20*time.Millisecond, func() error { return c.nats.connected(nil) })
}

// StopPostgres stops the ledger's Postgres at once (as in a crash). The
// cluster must have been started with Spec.PrivatePostgres.
func (c *Cluster) StopPostgres() {
	c.t.Helper()
	if c.pg == nil {
		c.t.Fatal("multiregion: StopPostgres needs Spec.PrivatePostgres")
	}
	c.pg.Stop()
}

// StartPostgres starts the ledger's Postgres again and waits until it
// accepts connections.
func (c *Cluster) StartPostgres() {
	c.t.Helper()
	if c.pg == nil {
		c.t.Fatal("multiregion: StartPostgres needs Spec.PrivatePostgres")
	}
	c.pg.Start(c.t)
}

// CrashProcess SIGKILLs the i-th limiter of region: its leases are lost
// and its windows never get a final report.
func (c *Cluster) CrashProcess(region string, i int) *Node {
	c.t.Helper()
	n := c.Node(region, i)
	n.mu.Lock()
	p := n.proc
	n.crashed = true
	n.mu.Unlock()
	p.kill()
	n.mu.Lock()
	n.killedAt = time.Now()
	n.mu.Unlock()
	return n
}

// RestartProcess starts a stopped or crashed node again (under a new
// process id) and waits until it is ready. Clients route around the node
// from the start (it is marked down before its SIGTERM), as after a
// load balancer has been told.
func (c *Cluster) RestartProcess(n *Node, skew time.Duration) {
	c.t.Helper()
	n.mu.Lock()
	p := n.proc
	n.down = true
	n.mu.Unlock()
	if p != nil && p.running() {
		if err := p.stop(c.stopTimeout()); err != nil {
			c.t.Logf("multiregion: %s: %v", n.Name(), err)
		}
	}
	c.relaunch(n, skew)
	n.mu.Lock()
	n.down = false
	n.mu.Unlock()
}

// Restart is one node's turn in a rolling restart: its process ids before
// and after, and when (elapsed since the turn began) the old process exited
// and the new one was ready.
type Restart struct {
	Node     string // region/index
	From, To string // process ids
	Exited   time.Duration
	Ready    time.Duration
	// ExitErr is the old process's exit status ("" for a clean exit).
	ExitErr string
}

// RollingRestart restarts the region's limiters one at a time, as a
// deployment rolls out: each gets SIGTERM while the harness still counts it
// serving (clients that route on /readyz must discover its drain, as a load
// balancer does), the harness waits until it has exited, starts it again
// under a new process id with the same clock skew, and waits until it is
// ready before the next one's turn. It fails the test when a process does
// not exit within its shutdown delay plus 15 s (it is then killed).
func (c *Cluster) RollingRestart(region string) []Restart {
	c.t.Helper()
	var out []Restart
	for _, n := range c.Region(region).Nodes() {
		n.mu.Lock()
		p, skew, from := n.proc, n.skew, n.id
		n.mu.Unlock()
		start := time.Now()
		if err := p.stop(c.stopTimeout()); err != nil {
			c.t.Errorf("multiregion: rolling restart of %s: %v", n.Name(), err)
		}
		r := Restart{Node: n.Name(), From: from, Exited: time.Since(start)}
		if err := p.exitErr(); err != nil {
			r.ExitErr = err.Error()
		}
		c.relaunch(n, skew)
		r.To, r.Ready = n.ID(), time.Since(start)
		out = append(out, r)
	}
	return out
}

// relaunch starts node n's next run (a new process id) with the given clock
// skew, joining the region's other serving nodes, and waits until it is
// ready. Its previous process must have exited.
func (c *Cluster) relaunch(n *Node, skew time.Duration) {
	c.t.Helper()
	n.mu.Lock()
	n.restarts++
	n.mu.Unlock()
	var join []string
	for _, m := range c.Region(n.Region).Nodes() {
		if m != n && m.serving() {
			join = append(join, m.memberlist)
		}
	}
	if err := n.launch(skew, join); err != nil {
		c.t.Fatal(err)
	}
	testserver.WaitFor(c.t, 60*time.Second, 50*time.Millisecond, n.ready)
}

// SkewClock restarts the node (gracefully: it hands back its leases and
// sends its final reports) with its wall clock offset by d (--clock-skew).
func (c *Cluster) SkewClock(n *Node, d time.Duration) {
	c.t.Helper()
	c.RestartProcess(n, d)
}

// ColdRestart stops every limiter of every region at once (SIGTERM, as a
// fleet-wide rollout or an outage of the whole fleet would) and starts them
// all again at once, each under a new process id with its clock skew and
// told to join its region's other processes (none is up yet: each runs
// alone and joins the others as they come up, membership.Start). Clients
// route around the limiters until every one is ready. It returns when every
// limiter answers /readyz, with the time the new processes were launched.
// Redis, NATS (and so the catalogue) and the ledger keep running: the
// limiters' own state (leases, gossip tables, memberlists) starts empty.
func (c *Cluster) ColdRestart() (launched time.Time) {
	c.t.Helper()
	nodes := c.Nodes()
	var wg sync.WaitGroup
	for _, n := range nodes {
		n.mu.Lock()
		p := n.proc
		n.down = true
		n.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p != nil && p.running() {
				if err := p.stop(c.stopTimeout()); err != nil {
					c.t.Logf("multiregion: %s: %v", n.Name(), err)
				}
			}
		}()
	}
	wg.Wait()
	launched = time.Now()
	for _, n := range nodes {
		n.mu.Lock()
		n.restarts++
		skew := n.skew
		n.mu.Unlock()
		var join []string
		for _, m := range c.Region(n.Region).Nodes() {
			if m != n {
				join = append(join, m.memberlist)
			}
		}
		if err := n.launch(skew, join); err != nil {
			c.t.Fatal(err)
		}
	}
	testserver.WaitFor(c.t, 60*time.Second, 20*time.Millisecond, func() error {
		for _, n := range nodes {
			if err := n.ready(); err != nil {
				return err
			}
		}
		return nil
	})
	for _, n := range nodes {
		n.mu.Lock()
		n.down = false
		n.mu.Unlock()
	}
	return launched
}
