package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MigratingKey is the stream metadata key MigrateStream sets on the stream
// it replaces: EnsureStream then lets reconcilers bind to it whatever its
// limits, so that a reconciler restarted meanwhile still drains it.
const MigratingKey = "quota.migrating"

// MigrateStream replaces a usage stream whose retention differs from
// cfg's (limits retention, from before work-queue retention: JetStream
// cannot change a retention to or from work queue in place) with one
// created from cfg, losing no report:
//
//  1. it closes the old stream to new reports (MaxBytes 1: with
//     DiscardNew nothing stored is removed) and marks it MigratingKey:
//     publishers' reports are refused as by a full stream and wait in
//     their spools, and reconcilers keep reading it;
//  2. it waits, polling every poll, until each consumer of the old stream
//     (the reconcilers) has nothing pending or unacknowledged: the ledger
//     holds every report the stream held;
//  3. it deletes the old stream and creates cfg's (EnsureStream).
//
// Reconcilers bind to the new stream by themselves (their consumer is
// lost), and limiters drain their spools into it at their next flush.
// When ctx ends before the consumers caught up, or the old stream holds
// reports that no consumer reads, the old stream gets its configuration
// back and MigrateStream returns an error: nothing was deleted. A stream
// with cfg's retention already is left alone (migrated false).
func MigrateStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, poll time.Duration) (migrated bool, err error) {
	if err := cfg.validate(); err != nil {
		return false, err
	}
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = EnsureStream(ctx, js, cfg)
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("ledger: migrate stream: look up %s: %w", cfg.Name, err)
	}
	old := s.CachedInfo().Config
	if old.Retention == cfg.Retention {
		return false, nil
	}
	closed := old
	closed.MaxBytes = 1
	closed.Metadata = maps.Clone(old.Metadata)
	if closed.Metadata == nil {
		closed.Metadata = map[string]string{}
	}
	closed.Metadata[MigratingKey] = cfg.Retention.String()
	if _, err := js.UpdateStream(ctx, closed); err != nil {
		return false, fmt.Errorf("ledger: migrate stream: close %s to new reports: %w", cfg.Name, err)
	}
	if err := waitConsumed(ctx, s, poll); err != nil {
		// Reopen it with a context of its own: ctx may be over.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := js.UpdateStream(rctx, old); rerr != nil {
			err = errors.Join(err, fmt.Errorf("ledger: migrate stream: reopen %s (max_bytes %d): %w", cfg.Name, old.MaxBytes, rerr))
		}
		return false, err
	}
	if err := js.DeleteStream(ctx, cfg.Name); err != nil {
		return false, fmt.Errorf("ledger: migrate stream: delete %s: %w", cfg.Name, err)
	}
	if _, err := EnsureStream(ctx, js, cfg); err != nil {
		return false, fmt.Errorf("ledger: migrate stream: the old stream is deleted; create the new one (the reconciler will): %w", err)
	}
	return true, nil
}

// waitConsumed waits until every consumer of s has delivered and seen
// acknowledged every message. A stream holding messages with no consumer
// is an error: nothing would ever write them.
func waitConsumed(ctx context.Context, s jetstream.Stream, poll time.Duration) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		left, err := unconsumed(ctx, s)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("ledger: migrate stream: %d reports not yet written when waiting ended: %w", left, ctx.Err())
		}
	}
}

// unconsumed is the most reports any consumer of s has still to write.
func unconsumed(ctx context.Context, s jetstream.Stream) (uint64, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("ledger: migrate stream: stream info: %w", err)
	}
	if info.State.Msgs > 0 && info.State.Consumers == 0 {
		return 0, fmt.Errorf("ledger: migrate stream: %s holds %d messages and has no consumer: start the reconciler first", info.Config.Name, info.State.Msgs)
	}
	var most uint64
	lister := s.ListConsumers(ctx)
	for ci := range lister.Info() {
		left := ci.NumPending + uint64(ci.NumAckPending)
		// The server counts a consumer's pending messages as the consumer
		// learns of them, so just after a publish the count can still be
		// 0 (seen under load: the stream then deleted an unwritten report).
		// The ack floor against the last message on its subjects is exact.
		last, err := lastSeqFor(ctx, s, info.State.LastSeq, ci.Config)
		if err != nil {
			return 0, err
		}
		if last > ci.AckFloor.Stream {
			left = max(left, 1)
		}
		most = max(most, left)
	}
	if err := lister.Err(); err != nil {
		return 0, fmt.Errorf("ledger: migrate stream: list consumers: %w", err)
	}
	return most, nil
}

// lastSeqFor is the sequence of the stream's last message on the
// subjects consumer cfg takes (streamLast when it takes all).
func lastSeqFor(ctx context.Context, s jetstream.Stream, streamLast uint64, cfg jetstream.ConsumerConfig) (uint64, error) {
	filters := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		filters = append(filters, cfg.FilterSubject)
	}
	if len(filters) == 0 {
		return streamLast, nil
	}
	var last uint64
	for _, f := range filters {
		m, err := s.GetLastMsgForSubject(ctx, f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("ledger: migrate stream: last message on %s: %w", f, err)
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}
