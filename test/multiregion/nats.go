package multiregion

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
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

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/internal/natsconf"
	"github.com/quotaplatform/quota/internal/testserver"
)

// natsMesh is one nats-server process per region, on the configuration the
// project ships (deploy/terraform/modules/region/nats.conf.tftpl, rendered
// by internal/natsconf): its users and roles (limiter-<region>,
// control-plane, reconciler), gateway authentication and
// reject_unknown_cluster, each password a random one of this mesh in the
// server's environment. The servers form a super-cluster by gateways the
// way the README tells operators to: each server has JetStream on, is a
// one-node cluster named after its region (JetStream in a super-cluster
// needs a cluster block; its one route leads to its own cluster port, which
// the server recognises as itself and drops), and its gateway block names
// every other region. Each gateway link (from → to) runs through a proxy
// carrying half the cross-region round trip each way.
type natsMesh struct {
	regions   []string
	control   string            // the control region: the control-plane user's
	passwords map[string]string // by user: natsconf.Users, "gateway"
	servers   map[string]*natsServer
	proxies   map[string]*testserver.GatewayProxy // by region: in front of its gateway port

	mu  sync.Mutex
	cut map[string]bool // regions cut off; guarded by mu
}

type natsServer struct {
	region  string
	client  string // host:port of the client listener
	monitor string // host:port of the HTTP monitor
	proc    *proc
}

// natsMaxFileStore is each server's JetStream file store limit: above the
// usage stream's byte limit (the daemons' default, 1 GiB, which JetStream
// reserves on the server holding the stream), far below the deploy's 8G.
const natsMaxFileStore = "2G"

// startNATSMesh starts the servers of regions; control is the region whose
// control-plane user may write the catalogue.
func startNATSMesh(t testing.TB, regions []string, control string, rtt time.Duration, dir string) *natsMesh {
	t.Helper()
	bin := testserver.RequireBinary(t, "nats-server", "nats-server")
	m := &natsMesh{
		regions:   append([]string(nil), regions...),
		control:   control,
		passwords: map[string]string{},
		servers:   make(map[string]*natsServer, len(regions)),
		proxies:   make(map[string]*testserver.GatewayProxy, len(regions)),
		cut:       map[string]bool{},
	}
	sort.Strings(m.regions)
	// One password per user for the whole mesh: gateway connections
	// authenticate with their server's own gateway credentials, which must
	// be the peers'.
	var env []string
	for _, u := range append(natsconf.Users(m.regions), "gateway") {
		m.passwords[u] = randomSecret(t)
		env = append(env, natsconf.PasswordEnv(u)+"="+m.passwords[u])
	}
	for _, r := range m.regions {
		p := testserver.StartGatewayProxy(t, r, rtt/2, m.isCut)
		p.SetTarget(hostPort(testserver.FreePort(t)))
		m.proxies[r] = p
	}
	for _, r := range m.regions {
		clientPort, httpPort, routePort := testserver.FreePort(t), testserver.FreePort(t), testserver.FreePort(t)
		s := &natsServer{region: r, client: hostPort(clientPort), monitor: hostPort(httpPort)}
		var gws []natsconf.Gateway
		for _, other := range m.regions {
			if other != r {
				gws = append(gws, natsconf.Gateway{Name: other, URLs: []string{"nats://" + m.proxies[other].Addr()}})
			}
		}
		_, gwPort, err := net.SplitHostPort(m.proxies[r].Target())
		if err != nil {
			t.Fatal(err)
		}
		gw, _ := strconv.Atoi(gwPort)
		// The server advertises its proxy, so that the gateway URLs servers
		// learn from each other lead through it too.
		conf, err := natsconf.Render(natsconf.Params{
			Name: r, Regions: m.regions, ControlRegion: control,
			ListenHost: "127.0.0.1", ClientPort: clientPort, HTTPPort: httpPort,
			ClusterPort: routePort, GatewayPort: gw,
			StoreDir:     filepath.Join(dir, "nats-"+r),
			MaxFileStore: natsMaxFileStore,
			Routes:       []string{"nats://" + hostPort(routePort)},
			Advertise:    m.proxies[r].Addr(),
			Gateways:     gws,
		})
		if err != nil {
			t.Fatalf("multiregion: nats config: %v", err)
		}
		cf := filepath.Join(dir, "nats-"+r+".conf")
		if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
			t.Fatalf("multiregion: nats config: %v", err)
		}
		s.proc = newProc("nats-"+r, bin, dir, []string{"-c", cf}, append([]string{"POD_NAME=nats-" + r}, env...))
		if err := s.proc.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.proc.stop(10 * time.Second) })
		m.servers[r] = s
	}
	return m
}

// clientUser is the NATS user of a limiter of region: the control-plane
// user for the one catalogue writer, else its region's limiter user.
func clientUser(region string, controlPlane bool) string {
	if controlPlane {
		return "control-plane"
	}
	return "limiter-" + region
}

// Password is user's password on every server of the mesh.
func (m *natsMesh) Password(user string) string { return m.passwords[user] }

// checkAuth connects to the region servers as clients and returns an
// error unless the shipped configuration's authentication and permissions
// hold: a client with no credentials, or with a wrong password, is refused
// by every server, and limiter-<a> may connect but not publish usage as
// another region b (the server answers a permissions violation).
func (m *natsMesh) checkAuth() error {
	for _, r := range m.regions {
		for _, o := range []struct {
			what string
			opts []nats.Option
		}{
			{"no credentials", nil},
			{"a wrong password", []nats.Option{nats.UserInfo("limiter-"+r, "not-"+m.passwords["limiter-"+r])}},
		} {
			nc, err := nats.Connect(m.URL(r), append(o.opts, nats.Timeout(5*time.Second), nats.NoReconnect())...)
			if err == nil {
				nc.Close()
				return fmt.Errorf("nats %s: a client with %s connected", r, o.what)
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				return fmt.Errorf("nats %s: a client with %s: want an authorization violation, got %v", r, o.what, err)
			}
		}
	}
	a, b := m.regions[0], m.regions[1]
	errs := make(chan error, 4)
	nc, err := nats.Connect(m.URL(a), nats.UserInfo("limiter-"+a, m.passwords["limiter-"+a]),
		nats.Timeout(5*time.Second), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		return fmt.Errorf("nats %s: limiter-%s cannot connect with its password: %w", a, a, err)
	}
	defer nc.Close()
	subject := "quota.usage." + b + ".x"
	if err := nc.Publish(subject, []byte("{}")); err != nil {
		return fmt.Errorf("nats %s: publish %s: %w", a, subject, err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("nats %s: flush: %w", a, err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
			return fmt.Errorf("nats %s: limiter-%s publishing on %s: want a permissions violation, got %v", a, a, subject, err)
		}
	case <-time.After(5 * time.Second):
		return fmt.Errorf("nats %s: limiter-%s published on %s without a permissions violation", a, a, subject)
	}
	return nil
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

// randomSecret is "p" and 16 random bytes in hex. nats-server parses an
// environment variable's value as a configuration value: a bare hex string
// that starts with a digit would be read as a number and fail to parse.
func randomSecret(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "p" + hex.EncodeToString(b)
}
