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

	"github.com/quotaplatform/quota/catalog/follow"
)

// watcher is the catalogue's follow.Handler: it reads the bucket into a
// fresh state, swaps it in, and applies pushed changes to the live state,
// telling the subscribers once per burst. Only the follower's goroutine
// uses its fields.
type watcher struct {
	c     *Catalog
	fresh *state    // the whole read under way; nil before its first entry
	cs    changeSet // what the burst under way made stale
}

var _ follow.Handler = (*watcher)(nil)

// Bind binds (or creates) the bucket and keeps it for writes and History.
func (w *watcher) Bind(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := w.c.bind(ctx, js)
	if err == nil {
		w.c.kv.Store(&kv)
	}
	return kv, err
}

// Read applies an entry of the whole read to the fresh state.
func (w *watcher) Read(kve jetstream.KeyValueEntry) {
	if w.fresh == nil {
		w.fresh = newState()
	}
	w.c.applyTo(w.fresh, kve)
}

// Loaded swaps the fresh state in: every key may be stale.
func (w *watcher) Loaded(ctx context.Context, revision uint64, more bool) error {
	fresh := w.fresh
	if fresh == nil {
		fresh = newState() // the bucket is empty
	}
	w.fresh = nil
	w.c.swap(fresh, revision)
	w.cs.all = true
	w.settle(ctx, more)
	return nil
}

// Change applies a pushed change to the live state.
func (w *watcher) Change(ctx context.Context, kve jetstream.KeyValueEntry, more bool) error {
	w.cs.add(w.c.apply(kve))
	w.settle(ctx, more)
	return nil
}

// settle tells the subscribers what went stale and asks for the cache file
// to be saved, once the burst is in.
func (w *watcher) settle(ctx context.Context, more bool) {
	if more {
		return
	}
	w.c.notifyTraced(ctx, w.cs)
	w.cs = changeSet{}
	w.c.cacheDue()
}

// Restart drops the ended watch's half-done read and says why it ended.
func (w *watcher) Restart(err error) {
	w.fresh, w.cs = nil, changeSet{}
	if errors.Is(err, follow.ErrResync) {
		w.c.log.Info("re-reading the catalogue bucket")
		return
	}
	w.c.log.Warn("catalogue watch failed; serving the last known good copy", "err", err, "version", w.c.Version())
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

// cacheDue asks saveCaches to write the cache file soon. It does not block.
func (c *Catalog) cacheDue() {
	select {
	case c.cacheDirty <- struct{}{}:
	default:
	}
}

// saveCaches writes the cache file cacheDelay after a change (later
// changes in that time ride along) until ctx ends; Stop saves what is
// still cued once the watch has ended.
func (c *Catalog) saveCaches(ctx context.Context) {
	for {
		select {
		case <-c.cacheDirty:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(cacheDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			c.cacheDue() // for Stop
			return
		}
		select {
		case <-c.cacheDirty: // a change since the first: this save holds it
		default:
		}
		c.saveCache()
	}
}

// saveCued saves the cache file if a change is cued.
func (c *Catalog) saveCued() {
	select {
	case <-c.cacheDirty:
		c.saveCache()
	default:
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
		c.logBadEntry("skipping bad catalogue entry", kve.Key(), kve.Revision(), err)
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
	c.log.Info("catalogue change applied", "kind", kind, "name", logName(kind, name), "op", kve.Operation().String(), "revision", kve.Revision())
	if kind == KindKey {
		c.log.Debug("catalogue change applied", "kind", kind, "name", name, "revision", kve.Revision())
	}
	return kind, name
}

// logBadEntry logs an entry that does not decode, at warn level without
// its error when the entry is a key's, since the error quotes its name;
// the error with the key is logged at debug level.
func (c *Catalog) logBadEntry(msg, kvk string, rev uint64, err error) {
	kind, _, _ := parseKVKey(kvk)
	if kind != KindKey {
		c.log.Warn(msg, "kind", kind, "revision", rev, "err", err)
		return
	}
	c.log.Warn(msg, "kind", kind, "revision", rev)
	c.log.Debug(msg, "kind", kind, "revision", rev, "err", err)
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
