package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotaplatform/quota/limit"
)

// ErrReporterClosed is returned by RecordDurable after Close: nothing
// recorded now is sent.
var ErrReporterClosed = errors.New("ledger: reporter closed")

// RecordDurable is Record, then a flush of the (key, window) counters the
// batch names (zero deltas name them too) that returns once the
// cumulative report of each, deltas included, was acknowledged by
// JetStream or written to the spool and synced. The region.Limiter calls
// it for refunds and charges, before it answers them: the store applied
// them, and a retry of a lost answer replays and records nothing, so they
// must not wait for the next ReportInterval in memory.
//
// It waits for a flush in progress (one at a time), then for JetStream's
// acknowledgement (at most PublishTimeout, or ctx's end) and, past it, while
// NATS is away or while the stream is full (counted and logged as in
// Flush), the spool's fsync. It returns an error when some
// report could be neither published nor spooled (spool full and NATS
// away); the usage stays in memory for the next flush. After Close it
// returns ErrReporterClosed.
func (r *Reporter) RecordDurable(ctx context.Context, batch []limit.Usage) error {
	r.Record(batch)
	keys := make([]entryKey, 0, len(batch))
	for i := range batch {
		keys = append(keys, entryKey{key: batch[i].Key, start: batch[i].WindowStart.UnixNano()})
	}
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	if r.closed {
		return ErrReporterClosed
	}
	now := r.cfg.Clock.Now()
	r.refusedFull = 0 // a full stream is logged once per call, as per flush
	ready := r.streamReady(ctx)
	due := r.buildDueOf(r.dueBuf.Get(), keys, now)
	defer func() { r.dueBuf.Put(due) }()
	if len(due) == 0 {
		return nil // covered by an accepted report already
	}
	t0 := time.Now()
	accepted, err := r.publishOrSpool(ctx, due, ready)
	unreported := r.markAccepted(due, accepted, now)
	r.m.DurableSeconds.Observe(time.Since(t0).Seconds())
	if unreported > 0 {
		r.m.DurableFailures.Inc()
		if err == nil {
			err = errors.New("neither published nor spooled")
		}
		return fmt.Errorf("ledger: %d of %d reports kept in memory only: %w", unreported, len(due), err)
	}
	return nil
}

// buildDueOf builds the next report of each of keys' entries that changed
// since its last accepted report, as buildDue does for every entry (final
// when its final is due), and appends them to due.
func (r *Reporter) buildDueOf(due []built, keys []entryKey, now time.Time) []built {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, k := range keys {
		e := r.entries[k]
		if e == nil || e.settled() || e.version == e.reported || containsKey(keys[:i], k) {
			continue
		}
		due = append(due, e.report(&r.cfg, now, e.finalDue(&r.cfg, now, false)))
	}
	return due
}

func containsKey(keys []entryKey, k entryKey) bool {
	for _, o := range keys {
		if o == k {
			return true
		}
	}
	return false
}
