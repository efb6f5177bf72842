package catalog

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog/follow"
	"github.com/quotaplatform/quota/limit"
)

// DefaultPlanName is the plan of a key with no assignment.
const DefaultPlanName = "default"

// BuiltinActor is the Actor of the built-in default plan.
const BuiltinActor = "built-in"

// Catalog holds the plan catalogue, kept up to date by a watch on a
// JetStream key-value bucket. Create it with New, start the watch with
// Start, and stop it with Stop.
type Catalog struct {
	cfg Config
	log *slog.Logger

	mu        sync.RWMutex
	st        *state        // guarded by mu
	version   uint64        // guarded by mu; bucket revision of the last applied change
	synced    bool          // guarded by mu; the watch has read the bucket at least once
	fromCache bool          // guarded by mu; st came from the cache file
	applied   chan struct{} // guarded by mu; closed and replaced after every apply

	subsMu sync.Mutex
	subs   []func()      // guarded by subsMu
	invs   []Invalidator // guarded by subsMu

	js         jetstream.JetStream                // set by Start
	kv         atomic.Pointer[jetstream.KeyValue] // the bucket, once bound
	follower   *follow.Follower
	cacheDirty chan struct{} // size 1: a change waits to be saved

	cancel  context.CancelFunc // set by Start
	running sync.WaitGroup     // the follower and the cache saver
}

var (
	_ limit.PlanResolver = (*Catalog)(nil)
	_ limit.CostResolver = (*Catalog)(nil)
)

// New returns a Catalog holding the last known good copy from
// Config.CachePath, if there is one. It starts nothing; call Start.
func New(cfg Config) (*Catalog, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Catalog{
		cfg:        cfg,
		log:        cfg.Logger,
		st:         newState(),
		applied:    make(chan struct{}),
		cacheDirty: make(chan struct{}, 1),
	}
	c.follower = follow.New(&watcher{c: c}, cfg.RetryInterval)
	if c.log == nil {
		c.log = slog.Default()
	}
	c.log = c.log.With("component", "catalog")
	if cfg.CachePath != "" {
		cf, err := loadCache(cfg.CachePath)
		if err != nil {
			// A damaged cache must not stop a start: the bucket is the
			// source of truth and the watch will rewrite the file.
			c.log.Warn("ignoring catalogue cache", "err", err)
		} else if cf != nil {
			for _, e := range cf.Entries {
				c.st.put(e)
			}
			c.version, c.fromCache = cf.Version, true
			c.log.Info("loaded last known good catalogue", "path", cfg.CachePath, "version", cf.Version,
				"entries", len(cf.Entries), "saved_at", cf.SavedAt)
		}
	}
	return c, nil
}

// OnChange registers f to be called after every applied burst of changes
// (and after every full read of the bucket), from the watch goroutine.
// Register before Start.
func (c *Catalog) OnChange(f func()) {
	c.subsMu.Lock()
	c.subs = append(c.subs, f)
	c.subsMu.Unlock()
}

// Invalidator is told which keys' cached plans a change made stale.
// *region.Limiter is one.
type Invalidator interface {
	Invalidate(key string)
	InvalidateAll()
}

// Subscribe registers inv to be told, after every applied burst of
// changes, what went stale: InvalidateAll when a plan changed or the bucket
// was re-read, Invalidate(key) for each key whose assignment changed, and
// nothing for endpoint weights. The daemon subscribes its Limiter. Register
// before Start.
func (c *Catalog) Subscribe(inv Invalidator) {
	c.subsMu.Lock()
	c.invs = append(c.invs, inv)
	c.subsMu.Unlock()
}

// Start starts the watch on the bucket through js, creating the bucket if
// it does not exist. It returns at once: while NATS is unreachable the
// watch retries every Config.RetryInterval and lookups answer from the last
// known good copy.
func (c *Catalog) Start(js jetstream.JetStream) error {
	if js == nil {
		return fmt.Errorf("catalog: Start: jetstream must not be nil")
	}
	if c.cancel != nil {
		return fmt.Errorf("catalog: Start called twice")
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.js, c.cancel = js, cancel
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		_ = c.follower.Run(ctx, js) // ctx's error: Stop was called
	}()
	if c.cfg.CachePath != "" {
		c.running.Add(1)
		go func() {
			defer c.running.Done()
			c.saveCaches(ctx)
		}()
	}
	return nil
}

// Stop ends the watch and waits for it, saving the cache file if a change
// waits to be saved. Safe to call without Start.
func (c *Catalog) Stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.running.Wait()
	c.saveCued() // a change the watch applied on its way out
}

// Resync makes the watch re-read the whole bucket. The watch already does
// so within 100ms of the connection reconnecting; call Resync to force it.
// It does not block.
func (c *Catalog) Resync() { c.follower.Resync() }

// Version is the bucket revision of the last applied change (0: none).
func (c *Catalog) Version() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.version
}

// Synced reports whether the watch has read the bucket at least once.
func (c *Catalog) Synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.synced
}

// Loaded reports whether the catalogue holds a real copy: read from the
// bucket, or the last known good copy from the cache file.
func (c *Catalog) Loaded() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.synced || c.fromCache
}

// Plan implements limit.PlanResolver.
func (c *Catalog) Plan(key string) (limit.Plan, error) {
	_, p, err := c.Resolve(key)
	return p, err
}

// Resolve returns the name and limits of key's plan: its assignment, else
// the plan named "default", else the built-in default. It wraps
// limit.ErrUnknownPlan when there is none.
func (c *Catalog) Resolve(key string) (string, limit.Plan, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	name := DefaultPlanName
	if a, ok := c.st.keys[key]; ok {
		name = a.Plan
	}
	if p, ok := c.planLocked(name); ok {
		return name, p.RegionPlan(), nil
	}
	if name == DefaultPlanName {
		return "", limit.Plan{}, fmt.Errorf("%w: key %q has no plan assignment and there is no %q plan", limit.ErrUnknownPlan, key, DefaultPlanName)
	}
	return "", limit.Plan{}, fmt.Errorf("%w: key %q is assigned plan %q, which does not exist", limit.ErrUnknownPlan, key, name)
}

func (c *Catalog) planLocked(name string) (Entry, bool) {
	if p, ok := c.st.plans[name]; ok {
		return p, true
	}
	if name == DefaultPlanName && c.cfg.DefaultPlan != (limit.Plan{}) {
		return planEntry(name, c.cfg.DefaultPlan, BuiltinActor), true
	}
	return Entry{}, false
}

// PlanEntry returns the plan called name, the built-in default included.
func (c *Catalog) PlanEntry(name string) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.planLocked(name)
}

// Assignment returns key's plan assignment.
func (c *Catalog) Assignment(key string) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.st.keys[key]
	return e, ok
}

// CostEntry returns endpoint's weight entry.
func (c *Catalog) CostEntry(endpoint string) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.st.costs[endpoint]
	return e, ok
}

// Cost implements limit.CostResolver.
func (c *Catalog) Cost(endpoint string) (int64, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.st.costs[endpoint]
	return e.Cost, ok
}

// RLSEntry returns the rate limit service rules of domain (KindRLS).
func (c *Catalog) RLSEntry(domain string) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.st.rls[domain]
	return e, ok
}

// RLSEntries returns the rate limit service rules of every domain
// (KindRLS), sorted by domain. Package rls builds its configuration from
// them on every change (OnChange).
func (c *Catalog) RLSEntries() []Entry {
	c.mu.RLock()
	out := make([]Entry, 0, len(c.st.rls))
	for _, e := range c.st.rls {
		out = append(out, e)
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Snapshot returns every entry, for debugging and tests.
func (c *Catalog) Snapshot() []Entry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.st.entries()
}
