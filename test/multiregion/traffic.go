package multiregion

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Endpoint is a class of request with its cost weight (set on the control
// plane with SetCost) and its fraction of the requests.
type Endpoint struct {
	Name   string
	Cost   int64
	Weight float64
}

// KeyLoad is one key's demand, in cost units per second, spread over the
// regions by the traffic's RegionDemand (or the key's own).
type KeyLoad struct {
	Key  string
	Rate float64
	// RegionDemand, when set, replaces Traffic.RegionDemand for this key.
	RegionDemand func(elapsed time.Duration) map[string]float64
	// Endpoint, when set, is the endpoint of every request for this key,
	// instead of one drawn from Traffic.Endpoints.
	Endpoint *Endpoint
}

// Burst is extra demand on one key from one region: Cost cost units spread
// evenly over [At, At+Over).
type Burst struct {
	Key    string
	Region string
	At     time.Duration
	Over   time.Duration
	Cost   float64
}

// Traffic describes the load. Demand is paced open-loop: every Tick each
// (key, region) accrues rate × fraction × tick of credit and sends requests
// while the credit covers the next request's cost. Each region's requests go
// round-robin to its limiters as a load balancer routes them: only to the
// nodes whose /readyz answered 200 at the last health check (see balancer).
type Traffic struct {
	Keys      []KeyLoad
	Endpoints []Endpoint
	Bursts    []Burst
	// RegionDemand gives each region's fraction of demand at an elapsed
	// time; nil spreads demand by the spec's region weights.
	RegionDemand func(elapsed time.Duration) map[string]float64
	// Duration bounds the run in time; MaxRequests (if positive) in count.
	Duration    time.Duration
	MaxRequests int
	// Tick is the pacing step. Default 50ms.
	Tick time.Duration
	// Batch is the most checks sent in one request; 1 (the default) sends
	// each check on /v1/allow, more uses /v1/allow/batch.
	Batch int
	// Workers is the number of concurrent clients per region. Default 6.
	Workers int
	// ReadyEvery is the interval of the load balancer's health check, a
	// GET /readyz of every node. Default 100ms.
	ReadyEvery time.Duration
	// Seed makes endpoint choice reproducible. Default 1.
	Seed uint64
	// WatchShares are keys whose region shares are sampled (from each
	// region's first node the balancer routes to) every ShareEvery during
	// the run.
	WatchShares []string
	// ShareEvery is the share sampling interval. Default 500ms.
	ShareEvery time.Duration
	// Probe, when set, is a key on a plan far above its demand: one client
	// per region sends it single checks back to back, every ProbeEvery,
	// round-robin over the region's nodes (skipping a node the balancer
	// does not route to). Its decisions always come from the local lease
	// (the fast path), so their latency is the fast path's as a client sees
	// it. They are kept apart from the other decisions.
	Probe      string
	ProbeEvery time.Duration
	// Observe, when set, is called with every decision the clients see
	// (semantics.go), from the generator's workers.
	Observe func(Observed)
	// GRPC sends every check, the probe's included, as Envoy's rate limit
	// service call ShouldRateLimit to the node's --grpc-listen
	// (Spec.GRPC) instead of POST /v1/allow: each key must be an rls
	// limiter key (GRPCKey), which names the descriptor to send, and the
	// cost is its hits_addend (grpc_traffic.go).
	GRPC bool
}

// ZipfKeys returns n keys named prefix-0… whose demand follows Zipf's law
// with exponent s: key i (from 0) demands top / (i+1)^s cost units per
// second.
func ZipfKeys(prefix string, n int, s, top float64) []KeyLoad {
	out := make([]KeyLoad, n)
	for i := range out {
		out[i] = KeyLoad{Key: fmt.Sprintf("%s-%d", prefix, i), Rate: top / math.Pow(float64(i+1), s)}
	}
	return out
}

// HotKey returns a key demanding factor × the mean demand of others.
func HotKey(key string, factor float64, others []KeyLoad) KeyLoad {
	sum := 0.0
	for _, k := range others {
		sum += k.Rate
	}
	return KeyLoad{Key: key, Rate: factor * sum / float64(max(len(others), 1))}
}

// check is one request the generator sends.
type check struct {
	key      string
	endpoint string
	cost     int64
	sec      int
}

// batchJob is one HTTP request's worth of checks for one region.
type batchJob struct {
	region string
	checks []check
}

// Generator sends a Traffic against a Cluster and records what the clients
// saw. Create it with NewGenerator, Start it, and Wait for its Record.
type Generator struct {
	c      *Cluster
	tr     Traffic
	rec    *Record
	client *http.Client
	lb     *balancer

	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

// NewGenerator prepares tr against c. It validates tr.
func NewGenerator(c *Cluster, tr Traffic) (*Generator, error) {
	if tr.Tick <= 0 {
		tr.Tick = 50 * time.Millisecond
	}
	if tr.Batch <= 0 {
		tr.Batch = 1
	}
	if tr.Workers <= 0 {
		tr.Workers = 6
	}
	if tr.Seed == 0 {
		tr.Seed = 1
	}
	if tr.ShareEvery <= 0 {
		tr.ShareEvery = 500 * time.Millisecond
	}
	if tr.ProbeEvery <= 0 {
		tr.ProbeEvery = 10 * time.Millisecond
	}
	if tr.ReadyEvery <= 0 {
		tr.ReadyEvery = 100 * time.Millisecond
	}
	if tr.Duration <= 0 {
		return nil, fmt.Errorf("multiregion: traffic Duration: must be positive")
	}
	if len(tr.Endpoints) == 0 {
		tr.Endpoints = []Endpoint{{Name: "", Cost: 1, Weight: 1}}
	}
	for _, e := range tr.Endpoints {
		if e.Cost < 1 || e.Weight <= 0 {
			return nil, fmt.Errorf("multiregion: traffic endpoint %q: cost and weight must be positive", e.Name)
		}
	}
	if tr.RegionDemand == nil {
		w := c.spec.Weights
		tr.RegionDemand = func(time.Duration) map[string]float64 { return w }
	}
	return &Generator{
		c:   c,
		tr:  tr,
		rec: newRecord(c.Regions()),
		client: &http.Client{
			Timeout: 5 * time.Second,
			Transport: &http.Transport{
				MaxIdleConns:        256,
				MaxIdleConnsPerHost: tr.Workers * 2,
				IdleConnTimeout:     time.Minute,
			},
		},
		lb:   newBalancer(c.Nodes(), tr.ReadyEvery),
		done: make(chan struct{}),
	}, nil
}

// Start begins sending, once a first health check of every node has
// answered. The generator stops after Duration, after MaxRequests, or on
// Stop.
func (g *Generator) Start() {
	g.lb.checkAll(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), g.tr.Duration)
	g.cancel = cancel
	g.start = time.Now()
	g.rec.start = g.start
	jobs := make(map[string]chan batchJob, len(g.c.order))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.lb.poll(ctx)
	}()
	for _, r := range g.c.order {
		// Room for a few ticks of batches: a slow region delays its own
		// demand instead of piling up without bound.
		ch := make(chan batchJob, 4*g.tr.Workers)
		jobs[r] = ch
		for w := 0; w < g.tr.Workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				g.worker(r, w, ch)
			}(w)
		}
	}
	if g.tr.Probe != "" {
		for _, r := range g.c.order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.probe(ctx, r)
			}()
		}
	}
	if len(g.tr.WatchShares) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.sampleShares(ctx)
		}()
	}
	go func() {
		defer close(g.done)
		g.pace(ctx, jobs)
		for _, ch := range jobs {
			close(ch)
		}
		wg.Wait()
		g.rec.end = time.Now()
		g.client.CloseIdleConnections()
	}()
}

// Stop ends the run early.
func (g *Generator) Stop() {
	if g.cancel != nil {
		g.cancel()
	}
}

// Wait waits until the run is over and returns its record.
func (g *Generator) Wait() *Record {
	<-g.done
	g.cancel()
	return g.rec
}

// Elapsed is the time since Start.
func (g *Generator) Elapsed() time.Duration { return time.Since(g.start) }

// At blocks until elapsed time d of the run (a schedule, not a
// synchronisation: the scenario acts at fixed points of the run).
func (g *Generator) At(d time.Duration) {
	if w := d - g.Elapsed(); w > 0 {
		t := time.NewTimer(w)
		defer t.Stop()
		select {
		case <-t.C:
		case <-g.done:
		}
	}
}

// Mark records a named instant of the run (a fault's start or end) for the
// report.
func (g *Generator) Mark(name string) { g.rec.mark(name, g.Elapsed()) }

// probe sends the probe key's checks from one client in region until ctx
// ends.
func (g *Generator) probe(ctx context.Context, region string) {
	tick := time.NewTicker(g.tr.ProbeEvery)
	defer tick.Stop()
	i := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		nodes := g.c.regions[region].Nodes()
		n := nodes[i%len(nodes)]
		i++
		if !g.lb.routes(n) {
			continue
		}
		t0 := time.Now()
		if err := g.probeOnce(ctx, n); err != nil {
			if !runOver(ctx) {
				g.rec.fail(region, n.ID(), 1, fmt.Errorf("probe: %w", err), !n.serving())
			}
			continue
		}
		g.rec.probeLatency(time.Since(t0))
	}
}

// runOver reports whether the run's context has ended, or is within
// 100 ms of its deadline: a probe cut off by the end of the run is not a
// failed call. gRPC sends the time left to the server, which may answer
// DeadlineExceeded a moment before the client's context marks itself done.
func runOver(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < 100*time.Millisecond
}

// probeOnce sends one check of the probe key to n, over the traffic's
// transport: gRPC, the example service's endpoint, or the daemon's
// /v1/allow. An answer other than an allowed decision is an error.
func (g *Generator) probeOnce(ctx context.Context, n *Node) error {
	if g.tr.GRPC {
		_, err := shouldRateLimit(ctx, n, g.tr.Probe, 1)
		return err
	}
	var req *http.Request
	if n.Example {
		req = exampleRequest(n, check{key: g.tr.Probe, endpoint: exampleQuote, cost: 1})
	} else {
		req, _ = http.NewRequest(http.MethodPost, n.URL()+"/v1/allow", strings.NewReader(`{"key":"`+g.tr.Probe+`","cost":1}`))
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.client.Do(req.WithContext(ctx))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

// sampleShares records each watched key's shares until ctx ends.
func (g *Generator) sampleShares(ctx context.Context) {
	tick := time.NewTicker(g.tr.ShareEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			at := g.Elapsed()
			for _, key := range g.tr.WatchShares {
				sh := map[string]float64{}
				for _, r := range g.c.order {
					for _, n := range g.c.regions[r].Nodes() {
						if !g.lb.routes(n) {
							continue
						}
						if v, err := g.c.NodeShare(n, key); err == nil {
							sh[r] = v
						}
						break
					}
				}
				if len(sh) > 0 {
					g.rec.sample(key, at, sh)
				}
			}
		}
	}
}

// pace accrues demand every tick and hands out batches.
func (g *Generator) pace(ctx context.Context, jobs map[string]chan batchJob) {
	rng := rand.New(rand.NewPCG(g.tr.Seed, 0x9e3779b97f4a7c15))
	totalW := 0.0
	for _, e := range g.tr.Endpoints {
		totalW += e.Weight
	}
	pick := func() Endpoint {
		x := rng.Float64() * totalW
		for _, e := range g.tr.Endpoints {
			if x -= e.Weight; x < 0 {
				return e
			}
		}
		return g.tr.Endpoints[len(g.tr.Endpoints)-1]
	}
	fixed := map[string]Endpoint{} // keys whose requests all go to one endpoint
	for _, k := range g.tr.Keys {
		if k.Endpoint != nil {
			fixed[k.Key] = *k.Endpoint
		}
	}
	type slot struct{ key, region string }
	credit := map[slot]float64{}
	next := map[slot]Endpoint{}
	sent := 0
	tick := time.NewTicker(g.tr.Tick)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			dt := now.Sub(last).Seconds()
			last = now
			el := now.Sub(g.start)
			sec := int(el / time.Second)
			pending := map[string][]check{}
			add := func(key, region string, amount float64) {
				s := slot{key, region}
				credit[s] += amount
				for {
					e, ok := next[s]
					if !ok {
						if e, ok = fixed[key]; !ok {
							e = pick()
						}
						next[s] = e
					}
					if credit[s] < float64(e.Cost) {
						return
					}
					credit[s] -= float64(e.Cost)
					delete(next, s)
					pending[region] = append(pending[region], check{key: key, endpoint: e.Name, cost: e.Cost, sec: sec})
				}
			}
			def := g.tr.RegionDemand(el)
			for _, k := range g.tr.Keys {
				fr := def
				if k.RegionDemand != nil {
					fr = k.RegionDemand(el)
				}
				for _, r := range g.c.order {
					if f := fr[r]; f > 0 {
						add(k.Key, r, k.Rate*f*dt)
					}
				}
			}
			for _, b := range g.tr.Bursts {
				if el >= b.At && el < b.At+b.Over {
					add(b.Key, b.Region, b.Cost*dt/b.Over.Seconds())
				}
			}
			for _, r := range g.c.order {
				cs := pending[r]
				rng.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
				for len(cs) > 0 {
					n := min(len(cs), g.tr.Batch)
					if g.tr.MaxRequests > 0 && sent+n > g.tr.MaxRequests {
						n = g.tr.MaxRequests - sent
						if n <= 0 {
							return
						}
					}
					select {
					case jobs[r] <- batchJob{region: r, checks: cs[:n]}:
					case <-ctx.Done():
						return
					}
					sent += n
					cs = cs[n:]
				}
			}
		}
	}
}

// worker sends one region's batches, round-robin over its nodes as the
// balancer routes them.
func (g *Generator) worker(region string, w int, jobs <-chan batchJob) {
	i := w
	for job := range jobs {
		n := g.lb.pick(g.c.regions[region].Nodes(), &i)
		if n == nil {
			g.rec.fail(region, "", len(job.checks), fmt.Errorf("no live limiter in region %s", region), false)
			continue
		}
		g.send(n, job.checks)
	}
}

type decisionJSON struct {
	Allowed       bool   `json:"allowed"`
	Degraded      bool   `json:"degraded"`
	FailurePolicy string `json:"failure_policy"`
	Error         string `json:"error"`
	Field         string `json:"field"`
	Status        int    `json:"status"`
	// The quota fields of a key whose plan has quotas (docs/design.md
	// [quotas]); absent otherwise.
	Tightest       string           `json:"tightest"`
	QuotaRejected  bool             `json:"quota_rejected"`
	QuotaRemaining []QuotaRemaining `json:"quota_remaining"`
}

type checkJSON struct {
	Key      string  `json:"key"`
	Cost     *int64  `json:"cost,omitempty"`
	Endpoint *string `json:"endpoint,omitempty"`
}

func (ch check) body() checkJSON {
	if ch.endpoint == "" {
		c := ch.cost
		return checkJSON{Key: ch.key, Cost: &c}
	}
	e := ch.endpoint
	return checkJSON{Key: ch.key, Endpoint: &e}
}

// send makes one HTTP request for checks on node n and records the result.
func (g *Generator) send(n *Node, checks []check) {
	if g.tr.GRPC {
		g.sendGRPC(n, checks)
		return
	}
	if n.Example {
		g.sendExample(n, checks)
		return
	}
	id := n.ID()
	var (
		path string
		body []byte
	)
	if len(checks) == 1 && g.tr.Batch == 1 {
		path = "/v1/allow"
		body, _ = json.Marshal(checks[0].body())
	} else {
		path = "/v1/allow/batch"
		cs := make([]checkJSON, len(checks))
		for i, ch := range checks {
			cs[i] = ch.body()
		}
		body, _ = json.Marshal(map[string]any{"checks": cs})
	}
	t0 := time.Now()
	resp, err := g.client.Post(n.URL()+path, "application/json", bytes.NewReader(body))
	if err != nil {
		g.rec.fail(n.Region, id, len(checks), err, !n.serving())
		return
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	lat := time.Since(t0)
	if err != nil || resp.StatusCode != http.StatusOK {
		g.rec.fail(n.Region, id, len(checks), fmt.Errorf("POST %s: %s %v %.200s", path, resp.Status, err, b), !n.serving())
		return
	}
	var ds []decisionJSON
	if path == "/v1/allow" {
		var d decisionJSON
		err = json.Unmarshal(b, &d)
		ds = []decisionJSON{d}
	} else {
		var res struct {
			Results []decisionJSON `json:"results"`
		}
		err = json.Unmarshal(b, &res)
		ds = res.Results
	}
	if err != nil || len(ds) != len(checks) {
		g.rec.fail(n.Region, id, len(checks), fmt.Errorf("POST %s: bad answer (%v): %.200s", path, err, b), false)
		return
	}
	g.rec.latency(lat, len(checks))
	for i, d := range ds {
		if d.Error != "" {
			g.rec.fail(n.Region, id, 1, fmt.Errorf("check %s: %d %s: %s", checks[i].key, d.Status, d.Field, d.Error), false)
			continue
		}
		g.rec.decision(checks[i], n.Region, id, d.Allowed, d.Degraded)
		if g.tr.Observe != nil {
			at := t0.Sub(g.start)
			g.tr.Observe(Observed{Key: checks[i].key, Region: n.Region, Process: id, Cost: checks[i].cost,
				Allowed: d.Allowed, Degraded: d.Degraded, FailurePolicy: d.FailurePolicy, Start: at, End: at + lat,
				Tightest: d.Tightest, QuotaRejected: d.QuotaRejected, Quotas: d.QuotaRemaining})
		}
	}
}

// percentile returns the p-quantile (0..1) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
