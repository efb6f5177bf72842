package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MigrateStream replaces a usage stream whose retention differs from
// cfg's (limits retention, from before work-queue retention: JetStream
// cannot change a retention to or from work queue in place) with one
// created from cfg, losing no report:
//
//  1. it moves the old stream off the usage subjects, so that publishers'
//     reports are refused and wait in their spools;
//  2. it waits, polling every poll, until each consumer of the old stream
//     (the reconcilers) has nothing pending or unacknowledged: the ledger
//     holds every report the stream held;
//  3. it deletes the old stream and creates cfg's (EnsureStream).
//
// Reconcilers bind to the new stream by themselves (their consumer is
// lost), and limiters drain their spools into it at their next flush.
// When ctx ends before the consumers caught up, or the old stream holds
// reports that no consumer reads, the old stream gets its subjects back
// and MigrateStream returns an error: nothing was deleted. A stream with
// cfg's retention already is left alone (migrated false).
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
	moved := old
	moved.Subjects = []string{"quota-migrating." + cfg.Name}
	if _, err := js.UpdateStream(ctx, moved); err != nil {
		return false, fmt.Errorf("ledger: migrate stream: move %s off %q: %w", cfg.Name, old.Subjects, err)
	}
	if err := waitConsumed(ctx, s, poll); err != nil {
		// Give the subjects back with a context of its own: ctx may be over.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := js.UpdateStream(rctx, old); rerr != nil {
			err = errors.Join(err, fmt.Errorf("ledger: migrate stream: give %s its subjects %q back: %w", cfg.Name, old.Subjects, rerr))
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
		most = max(most, ci.NumPending+uint64(ci.NumAckPending))
	}
	if err := lister.Err(); err != nil {
		return 0, fmt.Errorf("ledger: migrate stream: list consumers: %w", err)
	}
	return most, nil
}
