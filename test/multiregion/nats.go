package multiregion

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// natsMesh is one nats-server process per region, connected as a
// super-cluster by gateways the way the README tells operators to: each
// server has JetStream on, is a one-node cluster named after its region
// (JetStream in a super-cluster needs a cluster block), and its gateway
// block names every other region. Each gateway link (from → to) runs
// through a toxiproxy carrying half the cross-region round trip each way.
type natsMesh struct {
	regions []string
	servers map[string]*natsServer
	proxies map[string]*testserver.GatewayProxy // by region: in front of its gateway port

	mu  sync.Mutex
	cut map[string]bool // regions cut off; guarded by mu
}

type natsServer struct {
	region  string
	client  string // host:port of the client listener
	monitor string // host:port of the HTTP monitor
	proc    *proc
}

func startNATSMesh(t testing.TB, regions []string, rtt time.Duration, dir string) *natsMesh {
	t.Helper()
	bin := testserver.RequireBinary(t, "nats-server", "nats-server")
	m := &natsMesh{
		regions: append([]string(nil), regions...),
		servers: make(map[string]*natsServer, len(regions)),
		proxies: make(map[string]*testserver.GatewayProxy, len(regions)),
		cut:     map[string]bool{},
	}
	sort.Strings(m.regions)
	for _, r := range m.regions {
		p := testserver.StartGatewayProxy(t, r, rtt/2, m.isCut)
		p.SetTarget(hostPort(testserver.FreePort(t)))
		m.proxies[r] = p
	}
	for _, r := range m.regions {
		s := &natsServer{region: r, client: hostPort(testserver.FreePort(t)), monitor: hostPort(testserver.FreePort(t))}
		route := hostPort(testserver.FreePort(t))
		store := filepath.Join(dir, "nats-"+r)
		var gws []string
		for _, other := range m.regions {
			if other != r {
				gws = append(gws, fmt.Sprintf("    {name: %q, urls: [%q]}", other, "nats://"+m.proxies[other].Addr()))
			}
		}
		gwListen := m.proxies[r].Target()
		// The server advertises its proxy, so that the gateway URLs servers
		// learn from each other lead through it too.
		conf := fmt.Sprintf(`server_name: "nats-%[1]s"
listen: %[2]q
http: %[3]q
jetstream {
  store_dir: %[4]q
  max_memory_store: 64MB
  max_file_store: 512MB
}
cluster {
  name: %[1]q
  listen: %[5]q
  routes: [%[6]q]
}
gateway {
  name: %[1]q
  listen: %[7]q
  advertise: %[8]q
  gateways: [
%[9]s
  ]
}
`, r, s.client, s.monitor, store, route, "nats://"+route, gwListen, m.proxies[r].Addr(), strings.Join(gws, ",\n"))
		cf := filepath.Join(dir, "nats-"+r+".conf")
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			t.Fatalf("multiregion: nats config: %v", err)
		}
		s.proc = newProc("nats-"+r, bin, dir, []string{"-c", cf}, nil)
		if err := s.proc.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.proc.stop(10 * time.Second) })
		m.servers[r] = s
	}
	return m
}

func (m *natsMesh) isCut(region string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cut[region]
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// URL is the client URL of the region's server.
func (m *natsMesh) URL(region string) string { return "nats://" + m.servers[region].client }

// gatewayz is the part of /gatewayz the harness reads.
type gatewayz struct {
	Outbound map[string]struct {
		Connection *struct{} `json:"connection"`
	} `json:"outbound_gateways"`
	Inbound map[string][]struct{} `json:"inbound_gateways"`
}

// connected returns nil when every pair of regions whose links are up has
// gateways connected both ways, given the regions cut off.
func (m *natsMesh) connected(cut map[string]bool) error {
	for _, r := range m.regions {
		s := m.servers[r]
		if err := s.proc.exited(); err != nil {
			return err
		}
		var gz gatewayz
		if err := getJSON("http://"+s.monitor+"/gatewayz", &gz); err != nil {
			return err
		}
		for _, other := range m.regions {
			if other == r || cut[r] || cut[other] {
				continue
			}
			if out, ok := gz.Outbound[other]; !ok || out.Connection == nil {
				return fmt.Errorf("nats %s has no outbound gateway to %s", r, other)
			}
			if len(gz.Inbound[other]) == 0 {
				return fmt.Errorf("nats %s has no inbound gateway from %s", r, other)
			}
		}
	}
	return nil
}

// jetStreamReady returns nil when every server that is not cut off sees a
// JetStream meta leader.
func (m *natsMesh) jetStreamReady(cut map[string]bool) error {
	for _, r := range m.regions {
		if cut[r] {
			continue
		}
		var jsz struct {
			Meta *struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		if err := getJSON("http://"+m.servers[r].monitor+"/jsz", &jsz); err != nil {
			return err
		}
		if jsz.Meta == nil || jsz.Meta.Leader == "" {
			return fmt.Errorf("nats %s sees no JetStream meta leader yet", r)
		}
	}
	return nil
}

// cut closes every gateway connection to and from region and refuses new
// ones until heal.
func (m *natsMesh) cutRegion(region string) {
	m.mu.Lock()
	m.cut[region] = true
	m.mu.Unlock()
	for _, p := range m.proxies {
		p.CloseMatching(region)
	}
}

// heal lets region's gateway connections through again.
func (m *natsMesh) heal(region string) {
	m.mu.Lock()
	delete(m.cut, region)
	m.mu.Unlock()
}

var monitorClient = &http.Client{Timeout: 2 * time.Second}

func getJSON(url string, v any) error {
	resp, err := monitorClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
