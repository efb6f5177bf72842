package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/partition"
)

// zeroBelow: smoothed rates at or below this (cost units per second) count
// as zero, so that a key that went quiet leaves the digests.
const zeroBelow = 1e-3

// inboxSize is the capacity of the channel the NATS subscription delivers
// into: several intervals' worth of digests for a fleet of a few hundred
// processes. Beyond it NATS drops messages (slow consumer), which gossip
// tolerates: the next digest of the same process supersedes a lost one.
const inboxSize = 1024

var (
	_ limit.UsageSink = (*Node)(nil)
)

// Node is one process's gossip agent. Create it with New, start Run (or
// Start), and stop it by cancelling Run's context (or Stop).
type Node struct {
	cfg   Config
	nc    *nats.Conn
	clock clock.Clock
	log   *slog.Logger

	table atomic.Pointer[table] // current shares; swapped whole

	shareChanges atomic.Uint64 // OnChange calls (keys whose share moved enough)

	accMu sync.Mutex
	acc   map[string]pending // usage since the last tick; guarded by accMu
	// spare is the map acc was before the last tick, emptied, to be acc
	// after the next (nil when that map held more than maxSpareKeys): with
	// thousands of keys a tick, a new map each tick was most of the node's
	// allocation. Only the tick touches it.
	spare map[string]pending

	// regions is Config.Regions as a set; never modified after New.
	regions map[string]bool

	mu    sync.Mutex
	peers map[peerID]*peer     // latest digests; guarded by mu
	heard map[string]time.Time // last digest per region; guarded by mu
	gone  map[string]bool      // regions that left or were forgotten; guarded by mu
	// crowded holds, per region, the last epoch at which one of its
	// processes was refused or evicted for want of room (room.go).
	// Guarded by mu.
	crowded   map[string]uint64
	evicted   uint64             // processes evicted for want of room; guarded by mu
	frozen    bool               // guarded by mu
	warming   bool               // warm-up not over (frozen too); guarded by mu
	lastBytes int                // size of the last digest published; guarded by mu
	bad       uint64             // digests the decoder refused; guarded by mu
	rejected  [numReasons]uint64 // decoded digests refused, by reason; guarded by mu
	// badLogged is when a bad digest was last logged, and badAtLog the
	// count of bad digests then: the log says how many came since, at
	// most once per badLogEvery. Guarded by mu.
	badLogged time.Time
	badAtLog  uint64

	dropped [numDrops]atomic.Uint64 // keys left out, by reason

	// Touched by the Run goroutine only.
	own      map[string]*keyState
	totals   keyState
	learned  float64
	pubLearn float64
	lastTick time.Time
	ticks    int

	runMu  sync.Mutex
	cancel context.CancelFunc // set by Start; guarded by runMu
	done   chan struct{}      // closed when Start's Run returns; guarded by runMu
}

type pending struct{ demand, admitted int64 }

// maxSpareKeys bounds the map of pending usage kept for reuse (Node.spare):
// about 3 MB.
const maxSpareKeys = 1 << 16

type keyState struct {
	born                   uint64  // epoch of the key's first digest here
	demand, admitted       float64 // EWMAs, cost units per second
	pubDemand, pubAdmitted float64 // published (held) values
}

type peerID struct{ region, process string }

type peer struct {
	cur, prev     *Digest   // latest two digests, by epoch
	curAt, prevAt time.Time // when they arrived
	lastHeard     time.Time
	// seen counts the ticks at which this node had a new digest of the
	// process, of an epoch within StaleAfter of the tick (counted: the
	// epoch of the last one counted): its own measure of how long the
	// process has been heard, from which the process's trust ramps
	// (Config.TrustRamp). A sender cannot raise it faster than one a tick.
	seen    int
	counted uint64
	// inherited: first heard before this node's second tick, so it may
	// have been publishing long before this node listened. Its ticks seen
	// then start from the oldest key age its first digest reports (age0),
	// which is what a node that heard it from its start counts (see
	// trust.go).
	inherited bool
	age0      uint64
	// bye: the process said goodbye and has sent no digest since. It no
	// longer counts as missing when silent, and is forgotten once silent
	// for StaleAfter intervals; a digest after it (a forged goodbye, or a
	// restart under the same name) undoes it.
	bye bool
}

// of returns p's digest of epoch e and when it arrived, or nil.
func (p *peer) of(e uint64) (*Digest, time.Time) {
	switch {
	case p.cur != nil && p.cur.Epoch == e:
		return p.cur, p.curAt
	case p.prev != nil && p.prev.Epoch == e:
		return p.prev, p.prevAt
	}
	return nil, time.Time{}
}

// at returns the latest digest of p published before tick e (of an epoch
// before e), or nil.
func (p *peer) at(e uint64) *Digest {
	switch {
	case p.cur != nil && p.cur.Epoch < e:
		return p.cur
	case p.prev != nil && p.prev.Epoch < e:
		return p.prev
	}
	return nil
}

// New returns a Node that gossips over nc. It starts nothing: call Run or
// Start. nc may be shared with other users.
func New(nc *nats.Conn, cfg Config) (*Node, error) {
	if nc == nil {
		return nil, errors.New("gossip: nil NATS connection")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.HalfLife == 0 {
		cfg.HalfLife = 3 * cfg.Interval
	}
	if cfg.TrustRamp == 0 {
		cfg.TrustRamp = 2 * cfg.HalfLife
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w := make(map[string]float64, len(cfg.Weights))
	for k, v := range cfg.Weights {
		w[k] = v
	}
	cfg.Weights = w
	cfg.Regions = append([]string(nil), cfg.Regions...)
	sort.Strings(cfg.Regions)
	regions := make(map[string]bool, len(cfg.Regions))
	for _, r := range cfg.Regions {
		regions[r] = true
	}
	n := &Node{
		cfg:     cfg,
		nc:      nc,
		clock:   cfg.Clock,
		log:     cfg.Logger.With("component", "gossip", "region", cfg.Region, "process", cfg.Process),
		regions: regions,
		acc:     make(map[string]pending),
		spare:   make(map[string]pending),
		peers:   make(map[peerID]*peer),
		heard:   make(map[string]time.Time),
		gone:    make(map[string]bool),
		crowded: make(map[string]uint64),
		own:     make(map[string]*keyState),
		// Warming up: the first tick only listens.
		frozen:  true,
		warming: true,
	}
	n.table.Store(n.warmupTable())
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(collector{n}); err != nil {
			return nil, fmt.Errorf("gossip: register metrics: %w", err)
		}
		if cfg.HotKeyMetrics > 0 {
			if err := cfg.Registerer.Register(hotKeyCollector{n}); err != nil {
				return nil, fmt.Errorf("gossip: register hot-key metrics: %w", err)
			}
		}
	}
	return n, nil
}

// Record implements limit.UsageSink: it adds usage deltas to the demand
// (spent + rejected) and admitted cost (spent) of the current interval.
func (n *Node) Record(batch []limit.Usage) {
	n.accMu.Lock()
	defer n.accMu.Unlock()
	for _, u := range batch {
		p := n.acc[u.Key]
		p.demand += u.Spent + u.Rejected
		p.admitted += u.Spent
		n.acc[u.Key] = p
	}
}

// Share implements region.ShareSource: this region's share of key's global
// limit, in (0, 1]. A key with no digests gets the default share (from the
// historical weights); with one region it is 1.
func (n *Node) Share(key string) float64 {
	t := n.table.Load()
	return t.share(key)
}

// Start runs Run in a goroutine owned by the Node until Stop.
func (n *Node) Start() error {
	n.runMu.Lock()
	defer n.runMu.Unlock()
	if n.cancel != nil {
		return errors.New("gossip: already started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan error, 1) // Run reports its subscription once
	done := make(chan struct{})
	n.cancel, n.done = cancel, done
	go func() {
		defer close(done)
		if err := n.run(ctx, ready); err != nil {
			n.log.Warn("gossip stopped", "err", err)
		}
	}()
	if err := <-ready; err != nil {
		cancel()
		<-done
		n.cancel, n.done = nil, nil
		return err
	}
	return nil
}

// Stop ends Start's goroutine (publishing a goodbye) and waits for it, or
// for ctx.
func (n *Node) Stop(ctx context.Context) error {
	n.runMu.Lock()
	cancel, done := n.cancel, n.done
	n.runMu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run subscribes to every process's digests and ticks every Interval until
// ctx ends; then it publishes a goodbye and returns nil. It returns an error
// only if it cannot subscribe.
func (n *Node) Run(ctx context.Context) error { return n.run(ctx, nil) }

func (n *Node) run(ctx context.Context, ready chan<- error) error {
	inbox := make(chan *nats.Msg, inboxSize)
	sub, err := n.nc.ChanSubscribe(n.cfg.Subject+".>", inbox)
	if err == nil && n.nc.IsConnected() {
		// While NATS is unreachable the subscription waits in the client
		// and is sent on reconnection: a process that starts during an
		// outage gossips once NATS is back.
		err = n.nc.Flush()
	}
	if ready != nil {
		ready <- err
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return fmt.Errorf("gossip: subscribe %s.>: %w", n.cfg.Subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for {
		timer := n.clock.NewTimer(n.untilNextTick(n.clock.Now()))
	waiting:
		for {
			select {
			case m := <-inbox:
				n.receive(m.Subject, m.Data)
			case <-timer.C():
				n.tick(n.clock.Now())
				break waiting
			case <-ctx.Done():
				timer.Stop()
				n.goodbye()
				return nil
			}
		}
	}
}

func (n *Node) untilNextTick(now time.Time) time.Duration {
	iv := n.cfg.Interval
	ns := now.UnixNano()
	next := (ns/int64(iv) + 1) * int64(iv)
	return time.Duration(next - ns)
}

func (n *Node) epoch(now time.Time) uint64 {
	// Round to the nearest boundary: a timer fires at or just after it.
	return uint64((now.UnixNano() + int64(n.cfg.Interval)/2) / int64(n.cfg.Interval))
}

// store keeps d, the latest digest (or goodbye) of its process, unless a
// new process finds no room in its region (makeRoomLocked). A goodbye
// only marks its process as leaving (see peer.bye): it removes nothing at
// once, so a forged one takes no share from the region whose processes
// still publish.
func (n *Node) store(d *Digest, now time.Time) (rejectReason, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id := peerID{d.Region, d.Process}
	p := n.peers[id]
	if d.Goodbye {
		if p != nil {
			p.bye = true
		}
		return 0, false
	}
	if p == nil {
		own := id == peerID{n.cfg.Region, n.cfg.Process}
		if !own && !n.makeRoomLocked(d, now) {
			return rejectProcesses, true
		}
		p = &peer{inherited: n.ticks <= 1}
		if p.inherited {
			for _, k := range d.Keys {
				p.age0 = max(p.age0, k.Age)
			}
		}
		n.peers[id] = p
	}
	if p.cur != nil && d.Epoch < p.cur.Epoch {
		return 0, false // late and superseded
	}
	if extra := len(d.Keys) - n.cfg.MaxKeys; extra > 0 {
		n.dropped[dropProcessCap].Add(uint64(extra))
		d.Keys = d.Keys[:n.cfg.MaxKeys]
	}
	if p.cur != nil && d.Epoch == p.cur.Epoch {
		if sameDigest(p.cur, d) {
			return 0, false // our own echo, or a repeat
		}
		// Two digests of one process for one epoch: one is forged, and
		// nodes may hold either. Keep what every node can agree to bound
		// (mergeDigests), and count the forgery.
		p.cur = n.mergeDigests(p.cur, d, d.Region == n.cfg.Region)
		n.rejected[rejectConflict]++
		return 0, false
	}
	if p.cur != nil && d.Epoch > p.cur.Epoch {
		p.prev, p.prevAt = p.cur, p.curAt
	}
	p.cur, p.curAt = d, now
	p.bye = false
	p.lastHeard = now
	n.heard[d.Region] = now
	delete(n.gone, d.Region)
	return 0, false
}

func (n *Node) regionHasPeersLocked(r string) bool {
	for id := range n.peers {
		if id.region == r {
			return true
		}
	}
	return false
}

// tick computes shares from the digests of earlier epochs, then publishes
// this process's digest for the current epoch.
func (n *Node) tick(now time.Time) {
	e := n.epoch(now)
	n.ticks++
	if n.cfg.Flush != nil {
		n.cfg.Flush()
	}
	n.compute(now, e)
	d := n.digest(now, e)
	d.toWire()
	n.store(d, now) // never refused: this process is always kept
	n.publish(d)
}

// digest folds the usage since the last tick into the EWMAs and returns the
// digest to publish.
func (n *Node) digest(now time.Time, e uint64) *Digest {
	elapsed := n.cfg.Interval
	if !n.lastTick.IsZero() {
		elapsed = now.Sub(n.lastTick)
	}
	n.lastTick = now
	if elapsed <= 0 {
		elapsed = n.cfg.Interval
	}
	n.accMu.Lock()
	acc := n.acc
	n.acc, n.spare = n.spare, nil
	if n.acc == nil {
		n.acc = make(map[string]pending, len(acc))
	}
	n.accMu.Unlock()
	defer func() {
		// A cleared map keeps its size: past maxSpareKeys, one tick's
		// burst of keys would pin its memory for good, so it goes.
		if len(acc) <= maxSpareKeys {
			clear(acc)
			n.spare = acc
		}
	}()

	secs := elapsed.Seconds()
	h, hl := n.cfg.Hysteresis, n.cfg.HalfLife
	var totD, totA float64
	for key, p := range acc {
		if n.own[key] == nil {
			// A new key starts at its first sample, not at zero, so that its
			// demand is right from the first digest in every process.
			n.own[key] = &keyState{born: e, demand: float64(p.demand) / elapsed.Seconds(), admitted: float64(p.admitted) / elapsed.Seconds()}
		}
	}
	keys := make([]KeyDemand, 0, len(n.own))
	for key, s := range n.own {
		var sd, sa float64
		if p, ok := acc[key]; ok {
			sd, sa = float64(p.demand)/secs, float64(p.admitted)/secs
		}
		totD += sd
		totA += sa
		s.demand = partition.EWMA(s.demand, sd, elapsed, hl)
		s.admitted = partition.EWMA(s.admitted, sa, elapsed, hl)
		s.pubDemand = partition.Hold(s.pubDemand, s.demand, h, zeroBelow)
		s.pubAdmitted = partition.Hold(s.pubAdmitted, s.admitted, h, zeroBelow)
		if s.demand <= zeroBelow && s.admitted <= zeroBelow && s.pubDemand == 0 && s.pubAdmitted == 0 {
			delete(n.own, key)
			continue
		}
		if s.pubDemand > 0 || s.pubAdmitted > 0 {
			keys = append(keys, KeyDemand{Key: key, Demand: s.pubDemand, Admitted: s.pubAdmitted, Age: e - s.born})
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Demand != keys[j].Demand {
			return keys[i].Demand > keys[j].Demand
		}
		return keys[i].Key < keys[j].Key
	})
	if len(keys) > n.cfg.TopK {
		keys = keys[:n.cfg.TopK]
	}
	n.totals.demand = partition.EWMA(n.totals.demand, totD, elapsed, hl)
	n.totals.admitted = partition.EWMA(n.totals.admitted, totA, elapsed, hl)
	n.totals.pubDemand = partition.Hold(n.totals.pubDemand, n.totals.demand, h, zeroBelow)
	n.totals.pubAdmitted = partition.Hold(n.totals.pubAdmitted, n.totals.admitted, h, zeroBelow)
	n.learned = partition.EWMA(n.learned, totD, elapsed, n.cfg.WeightHalfLife)
	n.pubLearn = partition.Hold(n.pubLearn, n.learned, h, zeroBelow)
	return &Digest{
		Region: n.cfg.Region, Process: n.cfg.Process, Epoch: e,
		Demand: n.totals.pubDemand, Admitted: n.totals.pubAdmitted, Learned: n.pubLearn,
		Keys: keys,
	}
}

func (n *Node) publish(d *Digest) {
	b, kept, err := d.encode(make([]byte, 0, 4096), n.cfg.MaxDigestBytes)
	if err != nil {
		n.log.Warn("encode digest", "err", err)
		return
	}
	if kept < len(d.Keys) {
		// What other regions see is what we use ourselves.
		d.Keys = d.Keys[:kept]
	}
	n.mu.Lock()
	n.lastBytes = len(b)
	n.mu.Unlock()
	if err := n.nc.Publish(n.subject(), b); err != nil {
		n.log.Warn("publish digest", "err", err)
	}
}

func (n *Node) subject() string {
	return n.cfg.Subject + "." + n.cfg.Region + "." + n.cfg.Process
}

func (n *Node) goodbye() {
	d := &Digest{Region: n.cfg.Region, Process: n.cfg.Process, Epoch: n.epoch(n.clock.Now()), Goodbye: true}
	b, _, err := d.encode(nil, n.cfg.MaxDigestBytes)
	if err == nil {
		err = n.nc.Publish(n.subject(), b)
	}
	if err == nil {
		err = n.nc.FlushTimeout(time.Second)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		n.log.Warn("publish goodbye", "err", err)
	}
}

// Forget removes region from the shares (its processes' digests are
// dropped) until it is heard again: for a region known to be gone that
// did not say goodbye. Forgetting a region that is only partitioned away
// breaks the global bound by that region's share. Forgetting a region not
// in Config.Regions does nothing.
func (n *Node) Forget(r string) {
	if !n.regions[r] {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for id := range n.peers {
		if id.region == r {
			delete(n.peers, id)
		}
	}
	delete(n.crowded, r)
	if r != n.cfg.Region {
		n.gone[r] = true
	}
}

// floorFor returns the floor each of n regions gets.
func (c *Config) floorFor(regions int) float64 {
	if regions <= 0 {
		return c.Floor
	}
	return math.Min(c.Floor, 1/float64(regions))
}
