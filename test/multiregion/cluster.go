package multiregion

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// Cluster is a running multi-region deployment on loopback. Create it with
// Start; everything stops when the test ends. Its methods are called from
// the test goroutine, except the read-only ones (Nodes, Node, URLs), which
// are safe for concurrent use with the traffic generator.
type Cluster struct {
	t    testing.TB
	spec Spec
	dir  string
	bin  string // regional-limiter
	// exampleBin is examples/weighted-api, for Spec.ExampleRegion's
	// processes; "" without one.
	exampleBin string

	memberlistKey string // base64, one per cluster: the limiters' membership is encrypted

	nats    *natsMesh
	regions map[string]*Region
	order   []string // region names in Spec order

	pgURL     string               // the ledger database
	pg        *testserver.Postgres // private server, nil when on the machine's server
	reconURL  string
	reconProc *proc

	client *http.Client // keep-alive client for the control plane and probes

	// prom scrapes every process when the run started it (WithPrometheus);
	// nil otherwise.
	prom *Prometheus

	mu      sync.Mutex
	cutNATS map[string]bool // regions whose gateways are cut; guarded by mu
}

// Region is one region: its Redis (behind a proxy), its NATS link and its
// limiter processes.
type Region struct {
	Name       string
	Redis      *testserver.Redis
	RedisProxy *testserver.Proxy // limiter → Redis
	NATSProxy  *testserver.Proxy // limiter → the region's NATS server

	mu    sync.Mutex
	nodes []*Node // guarded by mu
}

// Node is one regional-limiter process, or one process of the example
// service (Spec.ExampleRegion).
type Node struct {
	Region string
	Index  int
	// Example: the node runs examples/weighted-api, not the daemon.
	Example bool

	c          *Cluster
	listen     string // host:port
	grpcListen string // host:port of --grpc-listen with Spec.GRPC; "" without
	memberlist string // host:port
	dataDir    string

	mu       sync.Mutex
	id       string        // --process-id of the current run; guarded by mu
	ids      []string      // every process id this node has run under; guarded by mu
	skew     time.Duration // --clock-skew of the current run; guarded by mu
	proc     *proc         // guarded by mu
	crashed  bool          // SIGKILLed and not restarted; guarded by mu
	down     bool          // being restarted: clients route around it; guarded by mu
	killedAt time.Time     // when CrashProcess killed it; guarded by mu
	restarts int           // guarded by mu
	flags    []string      // appended to the daemon's next runs (SetFlags); guarded by mu
}

// Start builds the binaries (once per test binary) and starts a cluster as
// spec describes, waiting until every process is ready.
func Start(t testing.TB, spec Spec) *Cluster {
	t.Helper()
	if err := spec.validate(); err != nil {
		t.Fatal(err)
	}
	limiterBin, err := binary("regional-limiter")
	if err != nil {
		t.Fatal(err)
	}
	reconBin, err := binary("reconciler")
	if err != nil {
		t.Fatal(err)
	}
	var exampleBin string
	if spec.ExampleRegion != "" {
		if exampleBin, err = binary("weighted-api"); err != nil {
			t.Fatal(err)
		}
	}
	c := &Cluster{
		t:             t,
		spec:          spec,
		memberlistKey: newMemberlistKey(t),
		dir:           t.TempDir(),
		bin:           limiterBin,
		exampleBin:    exampleBin,
		regions:       make(map[string]*Region),
		order:         append([]string(nil), spec.Regions...),
		cutNATS:       make(map[string]bool),
		client: &http.Client{
			Timeout:   5 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute},
		},
	}
	t.Cleanup(c.client.CloseIdleConnections)
	deadline := time.Now().Add(spec.StartTimeout)
	remaining := func() time.Duration { return max(time.Until(deadline), time.Second) }

	began := time.Now()
	// NATS first: the limiters' catalogue and the ledger stream need it.
	// The first region is the control region: its process 0 is the one
	// limiter with --control-plane (the catalogue's only writer). Redis,
	// Postgres and the migrations start while the servers connect their
	// gateways and elect a JetStream meta leader (several seconds).
	c.nats = startNATSMesh(t, spec.Regions, c.order[0], spec.CrossRegionRTT, c.dir)

	for _, r := range c.order {
		rd := testserver.StartRedis(t)
		c.regions[r] = &Region{
			Name:       r,
			Redis:      rd,
			RedisProxy: testserver.StartProxy(t, rd.Addr),
			NATSProxy:  testserver.StartProxy(t, c.nats.servers[r].client),
		}
	}

	// Ledger: Postgres, migrations, reconciler (on the first region's NATS).
	if spec.PrivatePostgres {
		c.pg = testserver.StartPostgres(t)
		c.pgURL = c.pg.NewDatabase(t)
	} else {
		c.pgURL = testserver.NewDatabase(t)
	}
	migrate := newProc("reconciler-migrate", reconBin, c.dir, []string{"migrate", "--postgres", c.pgURL}, nil)
	if err := migrate.start(); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, remaining(), 20*time.Millisecond, func() error {
		if migrate.running() {
			return fmt.Errorf("reconciler migrate still running")
		}
		return nil
	})
	if err := migrate.exitErr(); err != nil {
		t.Fatalf("multiregion: reconciler migrate: %v\n%s", err, migrate.tail(40))
	}

	testserver.WaitFor(t, remaining(), 50*time.Millisecond, func() error { return c.nats.connected(nil) })
	testserver.WaitFor(t, remaining(), 100*time.Millisecond, func() error { return c.nats.jetStreamReady(nil) })
	natsReady := time.Since(began)
	// Authentication is on: a stranger is refused, a limiter's user cannot
	// report as another region (cheap: a few connections).
	if err := c.nats.checkAuth(); err != nil {
		t.Fatalf("multiregion: %v", err)
	}

	reconListen := hostPort(testserver.FreePort(t))
	c.reconURL = "http://" + reconListen
	c.reconProc = newProc("reconciler", reconBin, c.dir, append([]string{"serve",
		"--nats", c.nats.URL(c.order[0]), "--nats-user", "reconciler", "--postgres", c.pgURL, "--listen", reconListen,
		"--batch-interval", reconcilerBatchInterval.String()}, spec.ReconcilerFlags...), c.reconcilerEnv())
	if err := c.reconProc.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.reconProc.stop(15 * time.Second) })

	// Limiter processes, in rounds: the i-th process of every region starts
	// once the ones before it are ready, and joins their memberlist (as a
	// rolling deployment does). ColdRestart starts them all at once
	// instead.
	for i := 0; i < spec.Processes; i++ {
		var round []*Node
		for _, r := range c.order {
			reg := c.regions[r]
			n := &Node{
				Region:     r,
				Index:      i,
				Example:    r == spec.ExampleRegion,
				c:          c,
				listen:     hostPort(testserver.FreePort(t)),
				memberlist: hostPort(testserver.FreePort(t)),
				dataDir:    filepath.Join(c.dir, fmt.Sprintf("data-%s-%d", r, i)),
			}
			if spec.GRPC && !n.Example {
				n.grpcListen = hostPort(testserver.FreePort(t))
			}
			var join []string
			for _, m := range reg.nodes {
				join = append(join, m.memberlist)
			}
			reg.nodes = append(reg.nodes, n)
			if err := n.launch(0, join); err != nil {
				t.Fatal(err)
			}
			round = append(round, n)
		}
		testserver.WaitFor(t, remaining(), 50*time.Millisecond, func() error {
			for _, n := range round {
				if err := n.ready(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Stop the limiters before the servers they use (cleanups run last in,
	// first out), so that their final reports reach the ledger.
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, n := range c.Nodes() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.mu.Lock()
				p := n.proc
				n.mu.Unlock()
				if p != nil {
					_ = p.stop(c.stopTimeout())
				}
			}()
		}
		wg.Wait()
	})
	testserver.WaitFor(t, remaining(), 50*time.Millisecond, c.ready)
	t.Logf("multiregion: cluster ready in %.1f s (NATS super-cluster with a JetStream meta leader after %.1f s)",
		time.Since(began).Seconds(), natsReady.Seconds())
	return c
}

// reconcilerEnv is the reconciler's secrets, in its environment as the
// deploy passes them: not in argv.
func (c *Cluster) reconcilerEnv() []string {
	env := []string{"QUOTA_NATS_PASSWORD=" + c.nats.Password("reconciler")}
	if c.spec.BillingToken != "" {
		env = append(env, "QUOTA_BILLING_TOKEN="+c.spec.BillingToken)
	}
	return env
}

// reconcilerBatchInterval is the reconciler's --batch-interval: how long
// usage reports wait in the reconciler before it writes them to Postgres.
const reconcilerBatchInterval = 100 * time.Millisecond

// stopTimeout bounds the wait for a limiter to exit after SIGTERM: its
// shutdown delay, then its drain.
func (c *Cluster) stopTimeout() time.Duration { return c.spec.ShutdownDelay + 15*time.Second }

// Spec returns the cluster's spec.
func (c *Cluster) Spec() Spec { return c.spec }

// Regions returns the region names in Spec order.
func (c *Cluster) Regions() []string { return append([]string(nil), c.order...) }

// Region returns the named region.
func (c *Cluster) Region(name string) *Region {
	r, ok := c.regions[name]
	if !ok {
		c.t.Fatalf("multiregion: no region %q", name)
	}
	return r
}

// Node returns the i-th process of region.
func (c *Cluster) Node(region string, i int) *Node {
	r := c.Region(region)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[i]
}

// Nodes returns every process, region by region.
func (c *Cluster) Nodes() []*Node {
	var out []*Node
	for _, r := range c.order {
		out = append(out, c.regions[r].Nodes()...)
	}
	return out
}

// Nodes returns the region's processes.
func (r *Region) Nodes() []*Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Node(nil), r.nodes...)
}

// PostgresURL is the ledger database.
func (c *Cluster) PostgresURL() string { return c.pgURL }

// ReconcilerURL is the reconciler's HTTP base URL.
func (c *Cluster) ReconcilerURL() string { return c.reconURL }

// NATSURL is the client URL of the region's NATS server (direct, not
// through the limiters' proxy).
func (c *Cluster) NATSURL(region string) string { return c.nats.URL(region) }

// ready returns nil when the reconciler and every live limiter answer
// /readyz.
func (c *Cluster) ready() error {
	if err := c.reconProc.exited(); err != nil {
		return err
	}
	if err := c.probe(c.reconURL + "/readyz"); err != nil {
		return fmt.Errorf("reconciler: %w", err)
	}
	for _, n := range c.Nodes() {
		if err := n.ready(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) probe(url string) error {
	resp, err := c.client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b [512]byte
		k, _ := resp.Body.Read(b[:])
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, strings.TrimSpace(string(b[:k])))
	}
	return nil
}

// URL is the node's HTTP base URL.
func (n *Node) URL() string { return "http://" + n.listen }

// ID is the node's current --process-id.
func (n *Node) ID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}

// IDs are every process id the node has run under (one per restart).
func (n *Node) IDs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.ids...)
}

// ControlPlane reports whether the node is the control-plane limiter:
// process 0 of the first region (the control region), run with
// --control-plane and the control-plane NATS user. Every catalogue write of
// the harness goes to it; the other limiters answer 403 to them.
func (n *Node) ControlPlane() bool { return n.Index == 0 && n.Region == n.c.order[0] }

// Name is region/index.
func (n *Node) Name() string { return n.Region + "/" + strconv.Itoa(n.Index) }

// Crashed reports whether the node was SIGKILLed and not restarted.
func (n *Node) Crashed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.crashed
}

// serving reports whether clients should send to the node.
func (n *Node) serving() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.crashed && !n.down
}

// launch starts the node's process with the given clock skew, joining the
// memberlist addresses in join. Each run has its own process id (the ledger
// keys reports by process, and a restarted process starts its counters
// from zero).
func (n *Node) launch(skew time.Duration, join []string) error {
	s := n.c.spec
	n.mu.Lock()
	defer n.mu.Unlock()
	id := fmt.Sprintf("%s-%d", n.Region, n.Index)
	if n.restarts > 0 {
		id = fmt.Sprintf("%s-%d.r%d", n.Region, n.Index, n.restarts)
	}
	user := clientUser(n.Region, n.ControlPlane())
	args := n.sharedArgs(id, skew, join, user)
	// The secrets go by environment, as the deploy passes them: not in argv.
	env := []string{
		"QUOTA_MEMBERLIST_KEY=" + n.c.memberlistKey,
		"QUOTA_NATS_PASSWORD=" + n.c.nats.Password(user),
	}
	name, bin := "limiter-"+n.Region+"-"+strconv.Itoa(n.Index), n.c.bin
	if n.Example {
		// The example service has the daemon's names for the flags it
		// shares, and reads operator routes with --read-token.
		name, bin = "example-"+n.Region+"-"+strconv.Itoa(n.Index), n.c.exampleBin
		env = append(env, "QUOTA_READ_TOKEN="+s.AdminToken)
	} else {
		args = append(args,
			"--admin-token", s.AdminToken,
			"--shutdown-delay", s.ShutdownDelay.String(),
			"--log-level", "info")
		if n.ControlPlane() {
			args = append(args, "--control-plane")
		}
		if n.grpcListen != "" {
			args = append(args, "--grpc-listen", n.grpcListen)
		}
		args = append(args, s.ExtraFlags...)
		args = append(args, n.flags...)
	}
	p := newProc(name, bin, n.c.dir, args, env)
	if err := p.start(); err != nil {
		return err
	}
	n.proc, n.id, n.skew, n.crashed = p, id, skew, false
	n.ids = append(n.ids, id)
	return nil
}

// sharedArgs are the flags the daemon and the example service share, for
// this node's run id with the given clock skew, joining join.
func (n *Node) sharedArgs(id string, skew time.Duration, join []string, user string) []string {
	s := n.c.spec
	reg := n.c.regions[n.Region]
	args := []string{
		"--region", n.Region,
		"--listen", n.listen,
		"--redis", "redis://" + reg.RedisProxy.Addr() + "/0",
		"--nats", "nats://" + reg.NATSProxy.Addr(),
		"--nats-user", user,
		"--data-dir", n.dataDir,
		"--process-id", id,
		"--window", s.Window.String(),
		"--report-interval", s.ReportInterval.String(),
		"--store-timeout", s.StoreTimeout.String(),
		"--processes", strconv.Itoa(s.Processes),
		"--gossip-interval", s.GossipInterval.String(),
		"--regions", strings.Join(s.Regions, ","),
		"--region-weights", s.weightsFlag(),
		"--share-floor", strconv.FormatFloat(s.ShareFloor, 'g', -1, 64),
		"--memberlist-bind", n.memberlist,
	}
	if len(join) > 0 {
		args = append(args, "--memberlist-join", strings.Join(join, ","))
	}
	if skew != 0 {
		args = append(args, "--clock-skew", skew.String())
	}
	return args
}

// ready returns nil when the node answers /readyz (or was crashed on
// purpose).
func (n *Node) ready() error {
	n.mu.Lock()
	p, crashed := n.proc, n.crashed
	n.mu.Unlock()
	if crashed {
		return nil
	}
	if err := p.exited(); err != nil {
		return err
	}
	if err := n.c.probe(n.URL() + "/readyz"); err != nil {
		return fmt.Errorf("%s: %w", n.Name(), err)
	}
	return nil
}

// Log returns the tail of the node's log, for failure messages.
func (n *Node) Log(lines int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc.tail(lines)
}

// newMemberlistKey returns a random 32-byte memberlist key, base64.
func newMemberlistKey(t testing.TB) string {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}
