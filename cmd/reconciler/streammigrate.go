package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/ledger"
)

// streamMigrate replaces a usage stream of limits retention by a
// work-queue one (ledger.MigrateStream), waiting at most --migrate-wait for the
// reconcilers to write what it holds.
func streamMigrate(ctx context.Context, o options, stdout io.Writer, log *slog.Logger) error {
	nc, js, err := connectJetStream(o, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg := usageStream(o, log)
	ctx, cancel := context.WithTimeout(ctx, o.MigrateWait)
	defer cancel()
	migrated, err := ledger.MigrateStream(ctx, js, cfg, time.Second)
	if err != nil {
		return err
	}
	if migrated {
		fmt.Fprintf(stdout, "stream %s replaced: %s retention; limiters drain their spools into it\n", cfg.Name, cfg.Retention)
	} else {
		fmt.Fprintf(stdout, "stream %s has %s retention already: nothing to do\n", cfg.Name, cfg.Retention)
	}
	return nil
}

// connectJetStream connects to --nats once, without retrying, for a
// command that runs and exits.
func connectJetStream(o options, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	opts, err := natsOptions(o, log)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(o.NATS, append(opts, nats.RetryOnFailedConnect(false))...)
	if err != nil {
		return nil, nil, fmt.Errorf("--nats %s: %w", redact(o.NATS), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}
