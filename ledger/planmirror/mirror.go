package planmirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	last := "" // the last failure warned about: the same one again is logged at debug
	for {
		err := m.watch(ctx)
		if ctx.Err() != nil {
			m.setSynced(false)
			return ctx.Err()
		}
		if m.Synced() {
			last = "" // it worked in between: warn again
		}
		m.setSynced(false)
		if !errors.Is(err, errResync) {
			m.m.Failures.Inc()
			level := slog.LevelWarn
			if err.Error() == last {
				level = slog.LevelDebug
			}
			last = err.Error()
			m.log.Log(ctx, level, "plan mirror failed; reading the whole bucket again", "err", err, "retry_in", m.cfg.RetryInterval)
			t := time.NewTimer(m.cfg.RetryInterval)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}
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

// errResync: the connection reconnected, so the watch's consumer may be
// gone with the old server; read the whole bucket again at once.
var errResync = errors.New("planmirror: NATS reconnected")

// reconnectCheck is how often the watch looks at the connection's
// reconnect counter (a local read, no I/O), as package catalog does.
const reconnectCheck = 100 * time.Millisecond

// watch binds the bucket, writes its full state, then applies its changes
// until a failure or ctx ends.
func (m *Mirror) watch(ctx context.Context) error {
	kv, asOf, err := m.bind(ctx)
	if err != nil {
		return err
	}
	nc := m.js.Conn()
	reconnects := nc.Stats().Reconnects
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.WatchAll(wctx)
	if err != nil {
		return fmt.Errorf("planmirror: watch bucket %q: %w", m.cfg.Bucket, err)
	}
	defer w.Stop() //nolint:errcheck // the watch's context ends with it anyway
	check := time.NewTicker(reconnectCheck)
	defer check.Stop()

	var pending []change
	initial := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-check.C:
			if nc.Stats().Reconnects != reconnects {
				return errResync
			}
		case kve, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("planmirror: watch of bucket %q closed", m.cfg.Bucket)
			}
			if kve == nil { // the initial values are all in
				initial = false
				if err := m.writeFull(ctx, pending, asOf); err != nil {
					return err
				}
				pending = pending[:0]
				continue
			}
			asOf = max(asOf, kve.Revision())
			if c, ok := m.decode(kve); ok {
				pending = append(pending, c)
			}
			if initial || (len(w.Updates()) > 0 && len(pending) < m.cfg.MaxBatch) {
				continue
			}
			if err := m.writeChanges(ctx, pending, asOf); err != nil {
				return err
			}
			pending = pending[:0]
		}
	}
}

// bind returns the bucket and its last revision before the watch starts.
func (m *Mirror) bind(ctx context.Context) (jetstream.KeyValue, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.WriteTimeout)
	defer cancel()
	kv, err := m.js.KeyValue(ctx, m.cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, 0, fmt.Errorf("planmirror: bucket %q does not exist yet: waiting for the control plane to create it", m.cfg.Bucket)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("planmirror: bind bucket %q: %w", m.cfg.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("planmirror: status of bucket %q: %w", m.cfg.Bucket, err)
	}
	var last uint64
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		last = bs.StreamInfo().State.LastSeq
	}
	return kv, last, nil
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

// writeFull writes the bucket's full state (changes, as of revision asOf:
// the bucket's last revision when the watch started, or a later one it
// delivered), tombstoning what it no longer holds.
func (m *Mirror) writeFull(ctx context.Context, changes []change, asOf uint64) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.WriteTimeout)
	defer cancel()
	if err := write(ctx, m.db, changes, true, asOf); err != nil {
		return err
	}
	m.advance(asOf)
	m.setSynced(true)
	m.log.Info("catalogue plans and key assignments mirrored into the ledger", "revision", asOf, "entries", len(changes))
	return nil
}

// writeChanges applies one burst of pushed changes.
func (m *Mirror) writeChanges(ctx context.Context, changes []change, asOf uint64) error {
	if len(changes) > 0 {
		ctx, cancel := context.WithTimeout(ctx, m.cfg.WriteTimeout)
		defer cancel()
		if err := write(ctx, m.db, changes, false, asOf); err != nil {
			return err
		}
		m.log.Debug("catalogue changes mirrored", "revision", asOf, "changes", len(changes))
	}
	m.advance(asOf)
	return nil
}
