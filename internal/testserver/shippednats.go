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
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/natsconf"
)

// ShippedNATS is a nats-server process running the configuration the
// deploy ships (deploy/terraform/modules/region/nats.conf.tftpl, rendered
// by internal/natsconf) for one region: its users, roles and gateway
// authorization, with a fresh random password per user.
type ShippedNATS struct {
	URL       string            // nats://127.0.0.1:port, no credentials
	Monitor   string            // host:port of the HTTP monitor
	Passwords map[string]string // by user (natsconf.Users, "route", "gateway")
	Config    string            // the rendered configuration
	cmd       *exec.Cmd
	dir       string
}

// ShippedNATSOptions adjusts StartShippedNATS. Zero values: region "eu" of
// regions eu and us, control plane in eu.
type ShippedNATSOptions struct {
	Region        string
	Regions       []string
	ControlRegion string
}

// StartShippedNATS starts nats-server on free loopback ports with the
// shipped configuration for one region (a super-cluster of one: no gateway
// peers; its one cluster route leads nowhere, as JetStream's clustered mode
// needs one), and stops it when the test ends.
func StartShippedNATS(t testing.TB, o ShippedNATSOptions) *ShippedNATS {
	t.Helper()
	bin := RequireBinary(t, "nats-server", "nats-server")
	if o.Region == "" {
		o.Region = "eu"
	}
	if len(o.Regions) == 0 {
		o.Regions = []string{"eu", "us"}
	}
	if o.ControlRegion == "" {
		o.ControlRegion = o.Region
	}
	hole := StartGatewayProxy(t, "", 0, func(string) bool { return true })
	dir := t.TempDir()
	port, httpPort := FreePort(t), FreePort(t)
	conf, err := natsconf.Render(natsconf.Params{
		Name: o.Region, Regions: o.Regions, ControlRegion: o.ControlRegion,
		ListenHost: "127.0.0.1", ClientPort: port, HTTPPort: httpPort,
		ClusterPort: FreePort(t), GatewayPort: FreePort(t),
		StoreDir: filepath.Join(dir, "jetstream"), MaxFileStore: "256MB",
		Routes:    []string{"nats://" + hole.Addr()},
		Advertise: "127.0.0.1:1",
	})
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	n := &ShippedNATS{
		URL:       "nats://127.0.0.1:" + strconv.Itoa(port),
		Monitor:   "127.0.0.1:" + strconv.Itoa(httpPort),
		Passwords: map[string]string{},
		Config:    conf,
		dir:       dir,
	}
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "POD_NAME=nats-"+o.Region)
	for _, u := range append(natsconf.Users(o.Regions), "route", "gateway") {
		n.Passwords[u] = randomPassword(t)
		env = append(env, natsconf.PasswordEnv(u)+"="+n.Passwords[u])
	}
	cmd := exec.Command(bin, "-c", path, "-l", filepath.Join(dir, "nats.log"))
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testserver: start nats-server: %v", err)
	}
	n.cmd = cmd
	t.Cleanup(n.Stop)
	WaitFor(t, 15*time.Second, 10*time.Millisecond, n.healthy)
	return n
}

// healthy asks the monitor whether JetStream is ready.
func (n *ShippedNATS) healthy() error {
	resp, err := http.Get("http://" + n.Monitor + "/healthz?js-enabled-only=true")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nats-server healthz: %s\n%s", resp.Status, n.LogTail())
	}
	c, err := net.DialTimeout("tcp", n.URL[len("nats://"):], time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// Stop kills the server. It is safe to call more than once.
func (n *ShippedNATS) Stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

// LogTail returns the server's log, for failure messages.
func (n *ShippedNATS) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "nats.log"))
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
	return hex.EncodeToString(b)
}
