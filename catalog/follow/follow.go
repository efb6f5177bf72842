package follow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrResync is why a watch ended when the follower is to read the bucket
// again at once: the connection reconnected (the watch's consumer may be
// gone with the old server), or Resync was called.
var ErrResync = errors.New("follow: resync: reading the whole bucket again")

// ReconnectCheck is how often a watch looks at the connection's reconnect
// counter (a local read, no I/O). The watch's heartbeats would notice a
// consumer lost with the old server only after seconds.
const ReconnectCheck = 100 * time.Millisecond

// A Handler is told what a Follower reads, from the Follower's goroutine,
// one call at a time.
type Handler interface {
	// Bind returns the bucket to watch, opening (or creating) it through
	// js. An error ends the watch.
	Bind(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error)
	// Read is given each entry of the whole read that starts every watch
	// (delete and purge markers included), in revision order.
	Read(kve jetstream.KeyValueEntry)
	// Loaded ends the whole read. revision is the highest revision it
	// held (0: the bucket is empty); more reports whether changes are
	// already waiting. An error ends the watch.
	Loaded(ctx context.Context, revision uint64, more bool) error
	// Change is given each change pushed after the whole read, in
	// revision order; more reports whether another is already waiting, so
	// that a handler can do its work once per burst. An error ends the
	// watch.
	Change(ctx context.Context, kve jetstream.KeyValueEntry, more bool) error
	// Restart is told why a watch ended when another is about to start:
	// err wraps ErrResync when it starts at once, else it is the failure,
	// and the next watch starts after the retry interval (or a Resync).
	// Whatever the ended watch's whole read left half done is stale.
	Restart(err error)
}

// Follower follows a bucket for a Handler. Build it with New and call Run.
type Follower struct {
	h      Handler
	retry  time.Duration
	resync chan struct{} // size 1: one pending request is enough
}

// New returns a Follower that calls h and waits retry after a failed
// watch. It starts nothing.
func New(h Handler, retry time.Duration) *Follower {
	return &Follower{h: h, retry: retry, resync: make(chan struct{}, 1)}
}

// Resync makes the running watch end and the bucket be read again, or the
// wait after a failure end at once. It does not block.
func (f *Follower) Resync() {
	select {
	case f.resync <- struct{}{}:
	default:
	}
}

// Run follows the bucket through js until ctx ends, and then returns
// ctx's error.
func (f *Follower) Run(ctx context.Context, js jetstream.JetStream) error {
	for {
		err := f.watch(ctx, js)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.h.Restart(err)
		if errors.Is(err, ErrResync) {
			continue
		}
		t := time.NewTimer(f.retry)
		select {
		case <-t.C:
		case <-f.resync:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// watch binds the bucket, reads it whole, then hands over its changes
// until a failure, a reconnection, a Resync or ctx's end.
func (f *Follower) watch(ctx context.Context, js jetstream.JetStream) error {
	kv, err := f.h.Bind(ctx, js)
	if err != nil {
		return err
	}
	nc := js.Conn()
	reconnects := nc.Stats().Reconnects
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.WatchAll(wctx)
	if err != nil {
		return fmt.Errorf("follow: watch bucket %q: %w", kv.Bucket(), err)
	}
	defer w.Stop() //nolint:errcheck // the watch's context ends with it anyway
	check := time.NewTicker(ReconnectCheck)
	defer check.Stop()

	initial := true
	var revision uint64 // the whole read's highest
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.resync:
			return ErrResync
		case <-check.C:
			if nc.Stats().Reconnects != reconnects {
				return fmt.Errorf("NATS reconnected: %w", ErrResync)
			}
		case kve, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("follow: watch of bucket %q closed", kv.Bucket())
			}
			more := len(w.Updates()) > 0
			switch {
			case kve == nil: // the initial values are all in
				initial = false
				err = f.h.Loaded(ctx, revision, more)
			case initial:
				revision = max(revision, kve.Revision())
				f.h.Read(kve)
			default:
				err = f.h.Change(ctx, kve, more)
			}
			if err != nil {
				return err
			}
		}
	}
}
