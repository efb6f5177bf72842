package testserver

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is one in-process NATS server per region, connected as a
// super-cluster by gateways: each server is a one-node cluster named after
// its region (with a route to itself, which JetStream's clustered mode
// requires), and its GatewayOpts name every other region. Core subjects
// (gossip) cross the gateways on interest as soon as WaitConnected returns.
// JetStream is on, as one meta group across the super-cluster; a stream is
// placed in the region (cluster) whose client created it. The meta leader
// takes several seconds to be elected after start: retry JetStream calls
// with WaitFor.
//
// Every gateway link runs through a small TCP proxy owned by the cluster, so
// that a test can cut one region off (Cut) and heal it (Heal) while the
// region's own server keeps serving its local clients.
type NATSCluster struct {
	regions []string
	servers map[string]*NATS
	links   map[[2]string]*linkProxy // (from, to) → proxy in front of to's gateway port
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
		links:   make(map[[2]string]*linkProxy),
	}
	sort.Strings(c.regions)
	gwPort := make(map[string]int, len(regions))
	routePort := make(map[string]int, len(regions))
	for _, r := range c.regions {
		gwPort[r] = FreePort(t)
		routePort[r] = FreePort(t)
	}
	for _, from := range c.regions {
		for _, to := range c.regions {
			if from != to {
				c.links[[2]string{from, to}] = startLinkProxy(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(gwPort[to])))
			}
		}
	}
	// Each server advertises an address where nothing listens, so that the
	// gateway URLs a server learns from INFO cannot bypass the link proxies;
	// connections always go through the configured proxy URL.
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
	for _, r := range c.regions {
		var remotes []*natsserver.RemoteGatewayOpts
		for _, other := range c.regions {
			if other == r {
				continue
			}
			u := &url.URL{Scheme: "nats", Host: c.links[[2]string{r, other}].addr()}
			remotes = append(remotes, &natsserver.RemoteGatewayOpts{Name: other, URLs: []*url.URL{u}})
		}
		region := r
		c.servers[r] = StartNATSWith(t, NATSOptions{Configure: func(o *natsserver.Options) {
			o.ServerName = "nats-" + region
			o.Cluster.Name = region
			o.Cluster.Host = "127.0.0.1"
			o.Cluster.Port = routePort[region]
			o.Routes = []*url.URL{{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(routePort[region]))}}
			o.Gateway = natsserver.GatewayOpts{
				Name:      region,
				Host:      "127.0.0.1",
				Port:      gwPort[region],
				Advertise: dead,
				Gateways:  remotes,
			}
		}})
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

// WaitConnected waits until every pair of live regions whose link is not cut
// has gateways connected in both directions.
func (c *NATSCluster) WaitConnected(t testing.TB, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, 20*time.Millisecond, c.checkGateways)
}

func (c *NATSCluster) checkGateways() error {
	for _, r := range c.regions {
		s := c.servers[r].Server
		if s == nil {
			continue
		}
		gz, err := s.Gatewayz(nil)
		if err != nil {
			return err
		}
		for _, other := range c.regions {
			if other == r || c.servers[other].Server == nil || c.links[[2]string{r, other}].isCut() || c.links[[2]string{other, r}].isCut() {
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

// Cut severs every gateway link to and from region: open connections are
// closed and new ones refused. The region's server keeps serving its own
// clients, so the region's processes still hear each other, but no message
// crosses to or from other regions until Heal.
func (c *NATSCluster) Cut(t testing.TB, region string) {
	t.Helper()
	for k, p := range c.links {
		if k[0] == region || k[1] == region {
			p.cut()
		}
	}
	// Wait until the other servers have noticed.
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
		}
		return nil
	})
}

// Heal lets region's gateway links connect again and waits until they have.
func (c *NATSCluster) Heal(t testing.TB, region string) {
	t.Helper()
	for k, p := range c.links {
		if k[0] == region || k[1] == region {
			p.heal()
		}
	}
	c.WaitConnected(t, 20*time.Second)
}

// linkProxy forwards TCP connections to target until cut.
type linkProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cutOff bool                  // guarded by mu
	conns  map[net.Conn]struct{} // open client and target sides; guarded by mu
	wg     sync.WaitGroup
}

func startLinkProxy(t testing.TB, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: gateway proxy: %v", err)
	}
	p := &linkProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refused := p.cutOff
		p.mu.Unlock()
		if refused {
			in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.cutOff {
			p.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *linkProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *linkProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *linkProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = false
}

func (p *linkProxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cutOff
}

func (p *linkProxy) close() {
	p.ln.Close()
	p.cut()
	p.wg.Wait()
}
