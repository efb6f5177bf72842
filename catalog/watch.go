package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

var errResync = errors.New("resync requested")

// run is the watch goroutine: bind the bucket, watch it, and start again
// after a failure or a Resync, until ctx ends.
func (c *Catalog) run(ctx context.Context, js jetstream.JetStream) {
	defer close(c.done)
	for {
		err := c.watch(ctx, js)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errResync) {
			c.log.Info("re-reading the catalogue bucket")
			continue
		}
		c.log.Warn("catalogue watch failed; serving the last known good copy", "err", err, "version", c.Version())
		t := time.NewTimer(c.cfg.RetryInterval)
		select {
		case <-t.C:
		case <-c.resync:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// bind returns the bucket, creating it when it does not exist (unless
// ReadOnly: then the control plane will) with Replicas placed in Cluster.
// An existing bucket is never changed; one whose replicas or cluster differ
// from the config's is logged once.
func (c *Catalog) bind(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, c.cfg.Bucket)
	if err == nil {
		if !c.cfg.ReadOnly {
			c.noteDifferences(ctx, kv)
		}
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("catalog: bind bucket %q: %w", c.cfg.Bucket, err)
	}
	if c.cfg.ReadOnly {
		return nil, fmt.Errorf("catalog: bucket %q does not exist yet: waiting for the control plane to create it", c.cfg.Bucket)
	}
	var placement *jetstream.Placement
	if c.cfg.Cluster != "" {
		placement = &jetstream.Placement{Cluster: c.cfg.Cluster}
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      c.cfg.Bucket,
		Description: "quota plan catalogue: plans, key assignments, endpoint weights",
		History:     uint8(c.cfg.History),
		Replicas:    c.cfg.Replicas,
		Placement:   placement,
		Storage:     jetstream.FileStorage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, c.cfg.Bucket) // another process won the race
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: create bucket %q: %w", c.cfg.Bucket, err)
	}
	c.log.Info("created catalogue bucket", "bucket", c.cfg.Bucket, "replicas", c.cfg.Replicas, "cluster", c.cfg.Cluster)
	return kv, nil
}

// noted holds the differences already logged, by logger, bucket and
// difference, so that binding again after every reconnection says it once.
var noted sync.Map // notedKey → struct{}

type notedKey struct {
	log               *slog.Logger
	bucket, differing string
}

// noteDifferences logs, once, how an existing bucket's replicas and cluster
// differ from the config's. Nothing is changed: they are the operator's.
// Not being able to tell is no reason to fail the bind.
func (c *Catalog) noteDifferences(ctx context.Context, kv jetstream.KeyValue) {
	st, err := kv.Status(ctx)
	if err != nil {
		c.log.Debug("cannot read the catalogue bucket's settings", "bucket", c.cfg.Bucket, "err", err)
		return
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return
	}
	info := bs.StreamInfo()
	var diffs []string
	if have := info.Config.Replicas; have != c.cfg.Replicas && !(have == 0 && c.cfg.Replicas == 1) {
		diffs = append(diffs, fmt.Sprintf("replicas %d (this process's setting: %d)", have, c.cfg.Replicas))
	}
	if c.cfg.Cluster != "" {
		have := ""
		if info.Cluster != nil {
			have = info.Cluster.Name
		}
		if have == "" && info.Config.Placement != nil {
			have = info.Config.Placement.Cluster
		}
		if have != c.cfg.Cluster {
			diffs = append(diffs, fmt.Sprintf("cluster %q (this process's setting: %q)", have, c.cfg.Cluster))
		}
	}
	if len(diffs) == 0 {
		return
	}
	differing := strings.Join(diffs, ", ")
	if _, dup := noted.LoadOrStore(notedKey{c.log, c.cfg.Bucket, differing}, struct{}{}); dup {
		return
	}
	c.log.Info("the catalogue bucket exists with other settings; leaving them as they are (an operator's, never downgraded)",
		"bucket", c.cfg.Bucket, "differs", differing)
}

// cacheDelay is how long a change waits before the cache file is written,
// so that a burst of changes costs one write.
const cacheDelay = 200 * time.Millisecond

// reconnectCheck is how often the watch looks at the connection's
// reconnect counter (a local read, no I/O).
const reconnectCheck = 100 * time.Millisecond

// watch reads the whole bucket into a fresh state, swaps it in, and then
// applies changes as they are pushed, until the watch fails or ctx ends.
func (c *Catalog) watch(ctx context.Context, js jetstream.JetStream) error {
	kv, err := c.bind(ctx, js)
	if err != nil {
		return err
	}
	c.kv.Store(&kv)
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("catalog: watch bucket %q: %w", c.cfg.Bucket, err)
	}
	defer w.Stop()

	// The cache file is written cacheDelay after a change, and on the way
	// out if a write is pending.
	save := time.NewTimer(time.Hour)
	save.Stop()
	pending := false
	defer func() {
		save.Stop()
		if pending {
			c.saveCache()
		}
	}()

	// After a reconnection the watch's consumer may be gone with the old
	// server; its heartbeats notice only after seconds. The connection's
	// reconnect counter, checked locally, notices at once.
	nc := js.Conn()
	reconnects := nc.Stats().Reconnects
	check := time.NewTicker(reconnectCheck)
	defer check.Stop()

	fresh := newState()
	var freshVersion uint64
	initial := true
	dirty := false
	var cs changeSet
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.resync:
			return errResync
		case <-check.C:
			if nc.Stats().Reconnects != reconnects {
				return errResync
			}
		case <-save.C:
			pending = false
			c.saveCache()
		case kve, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("catalog: watch of bucket %q closed", c.cfg.Bucket)
			}
			switch {
			case kve == nil: // the initial values are all in
				initial = false
				c.swap(fresh, freshVersion)
				fresh = nil
				dirty, cs.all = true, true
			case initial:
				freshVersion = max(freshVersion, kve.Revision())
				c.applyTo(fresh, kve)
			default:
				cs.add(c.apply(kve))
				dirty = true
			}
			if dirty && len(w.Updates()) == 0 {
				// A burst of changes is in: notify once, save soon.
				dirty = false
				c.notifyTraced(ctx, cs)
				cs = changeSet{}
				if !pending {
					pending = true
					save.Reset(cacheDelay)
				}
			}
		}
	}
}

// applyTo applies one pushed entry to st.
func (c *Catalog) applyTo(st *state, kve jetstream.KeyValueEntry) {
	if kve.Operation() != jetstream.KeyValuePut {
		kind, name, err := parseKVKey(kve.Key())
		if err == nil {
			st.remove(kind, name, kve.Revision())
		}
		return
	}
	e, err := decodeEntry(kve.Key(), kve.Value(), kve.Revision())
	if err != nil {
		c.log.Warn("skipping bad catalogue entry", "revision", kve.Revision(), "err", err)
		return
	}
	if e.Deleted {
		st.remove(e.Kind, e.Name, e.Revision)
		return
	}
	st.put(e)
}

// apply applies one pushed change to the live state.
func (c *Catalog) apply(kve jetstream.KeyValueEntry) (Kind, string) {
	kind, name, _ := parseKVKey(kve.Key())
	c.mu.Lock()
	c.applyTo(c.st, kve)
	c.version = max(c.version, kve.Revision())
	close(c.applied)
	c.applied = make(chan struct{})
	c.mu.Unlock()
	c.log.Info("catalogue change applied", "kind", kind, "name", name, "op", kve.Operation().String(), "revision", kve.Revision())
	return kind, name
}

// swap replaces the live state with a full read of the bucket.
func (c *Catalog) swap(st *state, version uint64) {
	c.mu.Lock()
	c.st = st
	c.version = version
	c.synced = true
	close(c.applied)
	c.applied = make(chan struct{})
	n := st.len()
	c.mu.Unlock()
	c.log.Info("catalogue read from bucket", "bucket", c.cfg.Bucket, "version", version, "entries", n)
}

// saveCache writes the live state to the cache file, if there is one.
func (c *Catalog) saveCache() {
	if c.cfg.CachePath == "" {
		return
	}
	c.mu.RLock()
	cf := &cacheFile{Version: c.version, SavedAt: time.Now().UTC(), Entries: c.st.entries()}
	c.mu.RUnlock()
	if err := saveCache(c.cfg.CachePath, cf); err != nil {
		c.log.Error("cannot save last known good catalogue", "err", err)
	}
}

// maxChangedKeys bounds the keys a changeSet lists one by one; beyond it
// every key is invalidated.
const maxChangedKeys = 1024

// changeSet is what a burst of changes made stale: every key (a plan
// changed, or the bucket was re-read) or some keys (their assignments
// changed). Endpoint weights make nothing stale: a cost is looked up per
// decision.
type changeSet struct {
	all  bool
	keys []string
}

// notifyTraced is notify in a "quota.catalog.push" span when tracing is
// configured.
func (c *Catalog) notifyTraced(ctx context.Context, cs changeSet) {
	if c.cfg.Tracer == nil {
		c.notify(cs)
		return
	}
	_, span := c.cfg.Tracer.Start(ctx, "quota.catalog.push", trace.WithAttributes(
		attribute.Int64("quota.version", int64(c.Version())), attribute.Bool("quota.all_keys", cs.all),
		attribute.Int("quota.keys_changed", len(cs.keys))))
	c.notify(cs)
	span.End()
}

func (cs *changeSet) add(kind Kind, name string) {
	switch kind {
	case KindPlan:
		cs.all = true
	case KindKey:
		if !cs.all && len(cs.keys) < maxChangedKeys {
			cs.keys = append(cs.keys, name)
		} else {
			cs.all = true
		}
	}
}

// notify tells the Invalidators what went stale and calls the OnChange
// subscribers.
func (c *Catalog) notify(cs changeSet) {
	c.subsMu.Lock()
	invs := append([]Invalidator{}, c.invs...)
	subs := append([]func(){}, c.subs...)
	c.subsMu.Unlock()
	for _, inv := range invs {
		if cs.all {
			inv.InvalidateAll()
			continue
		}
		for _, k := range cs.keys {
			inv.Invalidate(k)
		}
	}
	for _, f := range subs {
		f()
	}
}
