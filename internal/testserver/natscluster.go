package testserver

import (
	"fmt"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is one in-process NATS server per region, connected as a
// super-cluster by gateways: each server is a one-server cluster named after
// its region, and its GatewayOpts name every other region. Core subjects
// (gossip) cross the gateways on interest as soon as WaitConnected returns.
// JetStream is on, as one meta group across the super-cluster; a stream is
// placed in the region (cluster) whose client created it. The meta leader
// takes several seconds to be elected after start: retry JetStream calls
// with WaitFor.
//
// Every region's gateway listener sits behind a TCP proxy owned by the
// cluster, which the server also advertises, so every gateway connection
// into a region goes through it. The proxy reads the gateway name in the
// connecting server's CONNECT, so that a test can cut one region off
// (Cut: no gateway connection to or from it) and heal it (Heal) while the
// region's own server keeps serving its local clients.
type NATSCluster struct {
	regions []string
	servers map[string]*NATS
	proxies map[string]*GatewayProxy // by region: in front of its gateway port

	mu  sync.Mutex
	cut map[string]bool // regions cut off; guarded by mu
}

// StartNATSCluster starts one server per region (at least two), on random
// loopback ports, and waits until every gateway is connected both ways.
func StartNATSCluster(t testing.TB, regions ...string) *NATSCluster {
	t.Helper()
	if len(regions) < 2 {
		t.Fatalf("testserver: a NATS cluster needs at least 2 regions, got %v", regions)
	}
	c := &NATSCluster{
		regions: append([]string(nil), regions...),
		servers: make(map[string]*NATS, len(regions)),
		proxies: make(map[string]*GatewayProxy, len(regions)),
		cut:     map[string]bool{},
	}
	sort.Strings(c.regions)
	// Listeners get kernel-assigned ports and stay bound. The proxies learn
	// their target (the server's real gateway address) once it has
	// started; until then they refuse.
	for _, r := range c.regions {
		c.proxies[r] = StartGatewayProxy(t, r, 0, c.isCut)
	}
	// JetStream's clustered mode insists on a configured route; it points
	// at a black hole (a listener that closes every connection), so each
	// region stays a one-server cluster.
	hole := StartGatewayProxy(t, "", 0, func(string) bool { return true })
	for _, r := range c.regions {
		var remotes []*natsserver.RemoteGatewayOpts
		for _, other := range c.regions {
			if other != r {
				u := &url.URL{Scheme: "nats", Host: c.proxies[other].Addr()}
				remotes = append(remotes, &natsserver.RemoteGatewayOpts{Name: other, URLs: []*url.URL{u}})
			}
		}
		region := r
		c.servers[r] = StartNATSWith(t, NATSOptions{Configure: func(o *natsserver.Options) {
			o.ServerName = "nats-" + region
			o.Cluster.Name = region
			o.Cluster.Host = "127.0.0.1"
			o.Cluster.Port = natsserver.RANDOM_PORT
			o.Routes = []*url.URL{{Scheme: "nats", Host: hole.Addr()}}
			o.Gateway = natsserver.GatewayOpts{
				Name:      region,
				Host:      "127.0.0.1",
				Port:      natsserver.RANDOM_PORT,
				Advertise: c.proxies[region].Addr(),
				Gateways:  remotes,
			}
		}})
		c.proxies[r].SetTarget(c.servers[r].Server.GatewayAddr().String())
	}
	c.WaitConnected(t, 20*time.Second)
	return c
}

// Regions returns the region names, sorted.
func (c *NATSCluster) Regions() []string { return append([]string(nil), c.regions...) }

// Server returns the region's server.
func (c *NATSCluster) Server(region string) *NATS { return c.servers[region] }

// URL returns the client URL of the region's server.
func (c *NATSCluster) URL(region string) string { return c.servers[region].URL }

func (c *NATSCluster) isCut(region string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[region]
}

// WaitConnected waits until every pair of live regions, neither of them
// cut, has gateways connected in both directions.
func (c *NATSCluster) WaitConnected(t testing.TB, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, 20*time.Millisecond, c.checkGateways)
}

func (c *NATSCluster) checkGateways() error {
	for _, r := range c.regions {
		s := c.servers[r].Server
		if s == nil || c.isCut(r) {
			continue
		}
		gz, err := s.Gatewayz(nil)
		if err != nil {
			return err
		}
		for _, other := range c.regions {
			if other == r || c.servers[other].Server == nil || c.isCut(other) {
				continue
			}
			if out, ok := gz.OutboundGateways[other]; !ok || out.Connection == nil {
				return fmt.Errorf("region %s has no outbound gateway to %s", r, other)
			}
			if len(gz.InboundGateways[other]) == 0 {
				return fmt.Errorf("region %s has no inbound gateway from %s", r, other)
			}
		}
	}
	return nil
}

// Cut severs every gateway connection to and from region, and refuses new
// ones until Heal. The region's server keeps serving its own clients, so the
// region's processes still hear each other, but no message crosses to or
// from other regions. Cut returns once no server has a gateway connection
// to or from region.
func (c *NATSCluster) Cut(t testing.TB, region string) {
	t.Helper()
	c.mu.Lock()
	c.cut[region] = true
	c.mu.Unlock()
	for _, p := range c.proxies {
		p.CloseMatching(region)
	}
	WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, r := range c.regions {
			s := c.servers[r].Server
			if s == nil {
				continue
			}
			gz, err := s.Gatewayz(nil)
			if err != nil {
				return err
			}
			for name, out := range gz.OutboundGateways {
				if (r == region || name == region) && out.Connection != nil {
					return fmt.Errorf("gateway %s→%s still connected", r, name)
				}
			}
			for name, in := range gz.InboundGateways {
				if (r == region || name == region) && len(in) > 0 {
					return fmt.Errorf("gateway %s←%s still connected", r, name)
				}
			}
		}
		return nil
	})
}

// Heal lets region's gateways connect again and waits until they have.
func (c *NATSCluster) Heal(t testing.TB, region string) {
	t.Helper()
	c.mu.Lock()
	delete(c.cut, region)
	c.mu.Unlock()
	c.WaitConnected(t, 20*time.Second)
}
