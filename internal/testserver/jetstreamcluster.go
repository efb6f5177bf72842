package testserver

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// JetStreamCluster is one NATS cluster of in-process servers, every one
// routed to every other, with clustered JetStream: one meta group over all
// of them, so that a stream or bucket may have up to size replicas placed
// in the cluster (its name) and outlive the loss of a minority of servers.
// Server i is named "<cluster>-<i>". Unlike NATSCluster (one server per
// region, joined by gateways), this is one region's NATS as the deploy runs
// it with three servers.
type JetStreamCluster struct {
	name    string
	servers []*NATS
}

// StartJetStreamCluster starts size servers (at least 3) of the cluster
// name on free loopback ports, waits until JetStream has a meta leader
// that every server follows, and stops them when the test ends.
func StartJetStreamCluster(t testing.TB, name string, size int) *JetStreamCluster {
	t.Helper()
	if size < 3 {
		t.Fatalf("testserver: a JetStream cluster needs at least 3 servers, got %d", size)
	}
	// Every route port is picked before any server starts, so that each
	// server can list all of them (its own route to itself is dropped).
	ports := distinctPorts(t, size)
	routes := make([]*url.URL, size)
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(p)}
	}
	c := &JetStreamCluster{name: name, servers: make([]*NATS, size)}
	for i := range size {
		c.servers[i] = StartNATSWith(t, NATSOptions{Configure: func(o *natsserver.Options) {
			o.ServerName = name + "-" + strconv.Itoa(i)
			o.Cluster.Name = name
			o.Cluster.Host = "127.0.0.1"
			o.Cluster.Port = ports[i]
			o.Routes = routes
		}})
	}
	c.WaitReady(t, 30*time.Second)
	return c
}

// Name is the cluster's name: the placement of its streams.
func (c *JetStreamCluster) Name() string { return c.name }

// Size is the number of servers, stopped ones included.
func (c *JetStreamCluster) Size() int { return len(c.servers) }

// Server returns server i (its Server field is nil once stopped).
func (c *JetStreamCluster) Server(i int) *NATS { return c.servers[i] }

// URLs returns every server's client URL, comma-separated, as nats.Connect
// takes them: a client fails over to the others when its server goes.
func (c *JetStreamCluster) URLs() string {
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.URL
	}
	return strings.Join(urls, ",")
}

// Stop shuts server i down, as a node lost to the cluster. An in-process
// server cannot crash: it steps down the raft groups it leads on its way
// out, so their new leaders are chosen at once rather than after an
// election timeout. The other servers' clients are not disturbed.
func (c *JetStreamCluster) Stop(i int) { c.servers[i].Stop() }

// StreamLeader returns the index of the live server leading stream of the
// global account (no authentication), or -1 while it has none.
func (c *JetStreamCluster) StreamLeader(stream string) int {
	for i, s := range c.servers {
		if s.Server != nil && s.Server.JetStreamIsStreamLeader(natsserver.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// WaitReady waits until one live server leads JetStream's meta group and
// every live server is current with it.
func (c *JetStreamCluster) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, 20*time.Millisecond, c.ready)
}

func (c *JetStreamCluster) ready() error {
	leaders := 0
	for _, s := range c.servers {
		if s.Server == nil {
			continue
		}
		if s.Server.JetStreamIsLeader() {
			leaders++
		}
		if !s.Server.JetStreamIsCurrent() {
			return fmt.Errorf("server %s is not current with the JetStream meta group", s.Server.Name())
		}
	}
	if leaders != 1 {
		return errors.New("no JetStream meta leader yet")
	}
	return nil
}
