package planmirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog/follow"
)

// Mirror keeps the ledger's quota_plans and quota_key_plans equal to the
// catalogue bucket. Build it with New and call Run.
type Mirror struct {
	js  jetstream.JetStream
	db  DB
	cfg Config
	log *slog.Logger
	m   *Metrics

	mu       sync.Mutex
	revision uint64        // guarded by mu; the bucket revision the tables are current to
	synced   bool          // guarded by mu; the full state is written and no failure since
	changed  chan struct{} // guarded by mu; closed and replaced when revision or synced change
}

// New returns a Mirror reading the bucket through js and writing through
// db (the ledger's pool, migrated to 008 or later). It starts nothing.
func New(js jetstream.JetStream, db DB, cfg Config) (*Mirror, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if js == nil || db == nil {
		return nil, errors.New("planmirror: New needs a JetStream context and a database")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Mirror{js: js, db: db, cfg: cfg, log: cfg.Logger.With("component", "planmirror", "bucket", cfg.Bucket),
		m: cfg.Metrics, changed: make(chan struct{})}, nil
}

// Run mirrors the bucket until ctx ends, and then returns ctx's error. It
// reads the bucket's full state first, then applies pushed changes; after
// any failure it waits Config.RetryInterval and reads the full state again.
// While the bucket does not exist (the control plane creates it) it waits.
func (m *Mirror) Run(ctx context.Context) error {
	err := follow.New(&watcher{m: m}, m.cfg.RetryInterval).Run(ctx, m.js)
	m.setSynced(false)
	return err
}

// Synced reports whether the tables hold the bucket's full state and the
// mirror is following its changes.
func (m *Mirror) Synced() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.synced
}

// Revision is the bucket revision the tables are current to (0: none yet).
func (m *Mirror) Revision() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revision
}

// WaitRevision waits until the tables are current to bucket revision rev
// (a catalogue write's revision) or ctx ends.
func (m *Mirror) WaitRevision(ctx context.Context, rev uint64) error {
	for {
		m.mu.Lock()
		done, ch := m.synced && m.revision >= rev, m.changed
		m.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("planmirror: waiting for revision %d (at %d): %w", rev, m.Revision(), ctx.Err())
		}
	}
}

func (m *Mirror) setSynced(synced bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.synced == synced {
		return
	}
	m.synced = synced
	m.notifyLocked()
	if synced {
		m.m.Synced.Set(1)
	} else {
		m.m.Synced.Set(0)
	}
}

func (m *Mirror) advance(rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev > m.revision {
		m.revision = rev
		m.m.Revision.Set(float64(rev))
	}
	m.notifyLocked()
}

func (m *Mirror) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// watcher is the Mirror's follow.Handler: it gathers what the bucket
// holds or pushes and writes it. Only Run's goroutine uses it.
type watcher struct {
	m       *Mirror
	pending []change // read or pushed, not written yet
	asOf    uint64   // the bucket revision pending brings the tables to
	last    string   // the last failure warned about: the same one again is logged at debug
}

var _ follow.Handler = (*watcher)(nil)

// Bind returns the bucket and starts the whole read as of its last
// revision before the watch starts.
func (w *watcher) Bind(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, w.m.cfg.WriteTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, w.m.cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("planmirror: bucket %q does not exist yet: waiting for the control plane to create it", w.m.cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("planmirror: bind bucket %q: %w", w.m.cfg.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("planmirror: status of bucket %q: %w", w.m.cfg.Bucket, err)
	}
	w.pending, w.asOf = w.pending[:0], 0
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		w.asOf = bs.StreamInfo().State.LastSeq
	}
	return kv, nil
}

// Read keeps an entry of the whole read.
func (w *watcher) Read(kve jetstream.KeyValueEntry) {
	w.asOf = max(w.asOf, kve.Revision())
	if c, ok := w.m.decode(kve); ok {
		w.pending = append(w.pending, c)
	}
}

// Loaded writes the bucket's full state, as of revision asOf (the bucket's
// last revision when the watch started, or a later one it delivered),
// tombstoning what it no longer holds.
func (w *watcher) Loaded(ctx context.Context, revision uint64, _ bool) error {
	w.asOf = max(w.asOf, revision)
	ctx, cancel := context.WithTimeout(ctx, w.m.cfg.WriteTimeout)
	defer cancel()
	if err := write(ctx, w.m.db, w.pending, true, w.asOf); err != nil {
		return err
	}
	w.m.advance(w.asOf)
	w.m.setSynced(true)
	w.m.log.Info("catalogue plans and key assignments mirrored into the ledger", "revision", w.asOf, "entries", len(w.pending))
	w.pending = w.pending[:0]
	return nil
}

// Change keeps a pushed change, and writes the burst in one transaction
// once it is in or holds Config.MaxBatch changes.
func (w *watcher) Change(ctx context.Context, kve jetstream.KeyValueEntry, more bool) error {
	w.asOf = max(w.asOf, kve.Revision())
	if c, ok := w.m.decode(kve); ok {
		w.pending = append(w.pending, c)
	}
	if more && len(w.pending) < w.m.cfg.MaxBatch {
		return nil
	}
	if len(w.pending) > 0 {
		ctx, cancel := context.WithTimeout(ctx, w.m.cfg.WriteTimeout)
		defer cancel()
		if err := write(ctx, w.m.db, w.pending, false, w.asOf); err != nil {
			return err
		}
		w.m.log.Debug("catalogue changes mirrored", "revision", w.asOf, "changes", len(w.pending))
	}
	w.m.advance(w.asOf)
	w.pending = w.pending[:0]
	return nil
}

// Restart marks the tables unsynced and, for a failure (not a NATS
// reconnection), counts it and warns, once per distinct failure while
// nothing works in between.
func (w *watcher) Restart(err error) {
	if w.m.Synced() {
		w.last = "" // it worked in between: warn again
	}
	w.m.setSynced(false)
	if errors.Is(err, follow.ErrResync) {
		return
	}
	w.m.m.Failures.Inc()
	level := slog.LevelWarn
	if err.Error() == w.last {
		level = slog.LevelDebug
	}
	w.last = err.Error()
	w.m.log.Log(context.Background(), level, "plan mirror failed; reading the whole bucket again", "err", err, "retry_in", w.m.cfg.RetryInterval)
}

// decode is decode, logging and counting what it skips.
func (m *Mirror) decode(kve jetstream.KeyValueEntry) (change, bool) {
	c, err := decode(kve)
	switch {
	case errors.Is(err, errSkip):
		return change{}, false
	case err != nil:
		m.m.Skipped.Inc()
		m.log.Warn("skipping a catalogue entry that does not decode; its previous row stays", "err", err)
		return change{}, false
	}
	return c, true
}
