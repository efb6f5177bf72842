package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/natsembed"
)

// natsLink is the process's NATS connection: to --nats, or to an embedded
// server when --nats is empty. It connects in OnStart and never fails on an
// unreachable server: it keeps reconnecting, and tells OnReconnect
// subscribers when it is back.
type natsLink struct {
	o        Options
	log      *slog.Logger
	embedded *natsembed.Server // nil with --nats

	mu          sync.Mutex
	onReconnect []func() // guarded by mu

	nc *nats.Conn
	js jetstream.JetStream
}

// newNATSLink starts the embedded server when --nats is empty and connects.
// Connecting never blocks on an unreachable server (the connection keeps
// retrying in the background), so the connection is ready to hand to other
// constructors (the ledger reporter, the gossip node) at once.
func newNATSLink(lc fx.Lifecycle, o Options, log *slog.Logger) (*natsLink, error) {
	l := &natsLink{o: o, log: log.With("component", "nats")}
	if o.NATS == "" {
		cfg := natsembed.DefaultConfig()
		cfg.StoreDir = filepath.Join(o.DataDir, "nats")
		srv, err := natsembed.New(cfg)
		if err != nil {
			return nil, err
		}
		l.embedded = srv
	}
	if err := l.connect(); err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStop: l.stop})
	return l, nil
}

func provideNATSConn(l *natsLink) *nats.Conn { return l.nc }

func provideJetStream(l *natsLink) jetstream.JetStream { return l.js }

// OnReconnect registers f to run after every reconnection.
func (l *natsLink) OnReconnect(f func()) {
	l.mu.Lock()
	l.onReconnect = append(l.onReconnect, f)
	l.mu.Unlock()
}

func (l *natsLink) connect() error {
	opts := []nats.Option{
		nats.Name("regional-limiter " + l.o.Region + " " + l.o.ProcessID),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				l.log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			l.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
			l.mu.Lock()
			subs := append([]func(){}, l.onReconnect...)
			l.mu.Unlock()
			for _, f := range subs {
				f()
			}
		}),
	}
	url := l.o.NATS
	if l.embedded != nil {
		if err := l.embedded.Start(); err != nil {
			return err
		}
		opts = append(opts, l.embedded.ConnectOption())
		l.log.Info("started embedded NATS server with JetStream", "store_dir", filepath.Join(l.o.DataDir, "nats"))
	}
	opts = append(opts, l.o.NATSAuth.Options()...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		l.stopEmbedded()
		return fmt.Errorf("--nats %q: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		l.stopEmbedded()
		return fmt.Errorf("--nats: jetstream: %w", err)
	}
	l.nc, l.js = nc, js
	if !nc.IsConnected() {
		l.log.Warn("nats not reachable at start; serving the cached catalogue and retrying", "url", url)
	}
	return nil
}

func (l *natsLink) stop(context.Context) error {
	if l.nc != nil {
		// Drain would wait on an unreachable server; Close is enough, the
		// catalogue watch has already stopped.
		l.nc.Close()
	}
	l.stopEmbedded()
	return nil
}

func (l *natsLink) stopEmbedded() {
	if l.embedded != nil {
		l.embedded.Stop()
	}
}
