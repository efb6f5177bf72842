package testserver

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/natsconf"
)

// ShippedNATS is one nats-server process per region running the
// configuration the deploy ships (deploy/terraform/modules/region/
// nats.conf.tftpl, rendered by internal/natsconf): its users, roles and
// gateway authorization, with a fresh random password per user. The
// servers form a super-cluster by gateways, as the deploy's do.
type ShippedNATS struct {
	Passwords map[string]string // by user (natsconf.UsersOf, "gateway")
	servers   map[string]*shippedServer
}

type shippedServer struct {
	url     string
	monitor string
	config  string
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	waitErr error         // its exit status, once exited is closed
}

// StartShippedNATS starts one nats-server per region (at least two) on
// free loopback ports with the shipped configuration, the control plane in
// the first region (sorted), waits until their gateways are connected and
// JetStream answers, and stops them when the test ends. Each server is a
// one-node cluster whose one route, which JetStream's clustered mode needs,
// leads to itself (the server recognises and drops it).
func StartShippedNATS(t testing.TB, regions ...string) *ShippedNATS {
	t.Helper()
	return StartShippedNATSProcesses(t, nil, regions...)
}

// StartShippedNATSProcesses is StartShippedNATS with a user per limiter
// process of the regions processes lists (natsconf.Params.Processes).
func StartShippedNATSProcesses(t testing.TB, processes map[string][]string, regions ...string) *ShippedNATS {
	t.Helper()
	bin := RequireBinary(t, "nats-server", "nats-server")
	if len(regions) < 2 {
		t.Fatalf("testserver: StartShippedNATS needs at least two regions, got %v", regions)
	}
	regions = append([]string(nil), regions...)
	sort.Strings(regions)
	n := &ShippedNATS{Passwords: map[string]string{}, servers: map[string]*shippedServer{}}
	env := os.Environ()
	for _, u := range append(natsconf.UsersOf(regions, processes), "gateway") {
		n.Passwords[u] = randomPassword(t)
		env = append(env, natsconf.PasswordEnv(u)+"="+n.Passwords[u])
	}
	// Every port is picked before any server starts: a port a server has
	// not bound yet could otherwise be handed out again.
	ports := distinctPorts(t, 4*len(regions))
	gwPorts := map[string]int{}
	for i, r := range regions {
		gwPorts[r] = ports[4*i+3]
	}
	for _, r := range regions {
		var gws []natsconf.Gateway
		for _, other := range regions {
			if other != r {
				gws = append(gws, natsconf.Gateway{Name: other, URLs: []string{"nats://127.0.0.1:" + strconv.Itoa(gwPorts[other])}})
			}
		}
		i := sort.SearchStrings(regions, r)
		s := startShippedServer(t, bin, env, natsconf.Params{
			Name: r, Regions: regions, ControlRegion: regions[0],
			ListenHost: "127.0.0.1", ClientPort: ports[4*i], HTTPPort: ports[4*i+1], ClusterPort: ports[4*i+2], GatewayPort: gwPorts[r],
			MaxFileStore: "4GB", // a limit, not an allocation: the usage stream asks for 1 GiB
			Advertise:    "127.0.0.1:" + strconv.Itoa(gwPorts[r]),
			Gateways:     gws,
			Processes:    processes,
		})
		n.servers[r] = s
		t.Cleanup(s.stop)
	}
	for _, r := range regions {
		WaitFor(t, 30*time.Second, 100*time.Millisecond, n.servers[r].healthy)
	}
	return n
}

func startShippedServer(t testing.TB, bin string, env []string, p natsconf.Params) *shippedServer {
	t.Helper()
	dir := t.TempDir()
	p.StoreDir = filepath.Join(dir, "jetstream")
	p.Routes = []string{"nats://127.0.0.1:" + strconv.Itoa(p.ClusterPort)}
	conf, err := natsconf.Render(p)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	s := &shippedServer{
		url:     "nats://127.0.0.1:" + strconv.Itoa(p.ClientPort),
		monitor: "127.0.0.1:" + strconv.Itoa(p.HTTPPort),
		config:  conf,
		dir:     dir,
	}
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", path, "-l", filepath.Join(dir, "nats.log"))
	cmd.Env = append(env, "POD_NAME=nats-"+p.Name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Errors before the log file is open (a port in use) go to stderr.
	stderr, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("testserver: start nats-server: %v", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { s.waitErr = cmd.Wait(); close(s.exited) }()
	return s
}

// URL is the client URL of region's server, without credentials.
func (n *ShippedNATS) URL(region string) string { return n.servers[region].url }

// Config is the configuration region's server runs.
func (n *ShippedNATS) Config(region string) string { return n.servers[region].config }

// LogTail returns the end of region's server log, for failure messages.
func (n *ShippedNATS) LogTail(region string) string { return n.servers[region].logTail() }

// distinctPorts returns n ports that were free a moment ago, all different.
func distinctPorts(t testing.TB, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		if p := FreePort(t); !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// healthy asks the monitor whether the server, its gateways and JetStream
// are ready.
func (s *shippedServer) healthy() error {
	select {
	case <-s.exited:
		return fmt.Errorf("nats-server exited: %v\n%s", s.waitErr, s.logTail())
	default:
	}
	resp, err := http.Get("http://" + s.monitor + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nats-server healthz: %s\n%s", resp.Status, s.logTail())
	}
	c, err := net.DialTimeout("tcp", s.url[len("nats://"):], time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func (s *shippedServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

func (s *shippedServer) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "nats.log"))
	if e, _ := os.ReadFile(filepath.Join(s.dir, "stderr.log")); len(e) > 0 {
		b = append(append(b, "\nstderr:\n"...), e...)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func randomPassword(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	// nats-server parses an environment variable's value as a
	// configuration token: a value starting with a digit would be read as
	// a number and refused.
	return "p" + hex.EncodeToString(b)
}
