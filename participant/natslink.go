package participant

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/natsembed"
	"github.com/quotaplatform/quota/internal/natsrole"
)

// natsLink is the participant's NATS connection: the caller's, one dialed
// to Options.NATSURL, or one to an embedded server. A dialed connection
// never fails on an unreachable server: it keeps reconnecting, and tells
// the OnReconnect subscribers when it is back.
type natsLink struct {
	log      *slog.Logger
	owned    bool              // the participant dialed nc and closes it
	embedded *natsembed.Server // nil unless Options.NATS and NATSURL are empty

	mu          sync.Mutex
	onReconnect []func() // guarded by mu

	nc *nats.Conn
	js jetstream.JetStream
}

// dialNATS starts the embedded server when no NATS is given, and connects.
// Connecting does not block on an unreachable server, so the connection
// can be handed to the other parts (the ledger reporter, the gossip node)
// at once.
func dialNATS(o *Options, log *slog.Logger) (*natsLink, error) {
	l := &natsLink{log: log.With("component", "nats")}
	if o.NATS != nil {
		js, err := jetstream.New(o.NATS)
		if err != nil {
			return nil, fmt.Errorf("participant: NATS: jetstream: %w", err)
		}
		l.nc, l.js = o.NATS, js
		return l, nil
	}
	l.owned = true
	opts := []nats.Option{
		nats.Name(o.Name + " " + o.Region + " " + o.ProcessID),
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
	if o.embedded() {
		cfg := natsembed.DefaultConfig()
		cfg.StoreDir = filepath.Join(o.DataDir, "nats")
		srv, err := natsembed.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("participant: embedded NATS: %w", err)
		}
		if err := srv.Start(); err != nil {
			return nil, fmt.Errorf("participant: embedded NATS: %w", err)
		}
		l.embedded = srv
		opts = append(opts, srv.ConnectOption())
		l.log.Info("started embedded NATS server with JetStream", "store_dir", cfg.StoreDir)
	}
	// The process's own inboxes: the shipped NATS configuration lets a
	// limiter subscribe under its process's prefix only (natsrole), which
	// lies under its region's, so that a region-wide credential works too.
	inbox := natsrole.ControlPlane
	if !o.ControlPlane {
		inbox = natsrole.LimiterProcess(o.Region, gossipProcessName(o.ProcessID))
	}
	opts = append(opts, natsrole.Inbox(inbox))
	opts = append(opts, o.NATSOptions...)
	nc, err := nats.Connect(o.NATSURL, opts...)
	if err != nil {
		l.stopEmbedded()
		return nil, fmt.Errorf("participant: NATSURL %q: %w", o.NATSURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		l.stopEmbedded()
		return nil, fmt.Errorf("participant: NATSURL: jetstream: %w", err)
	}
	l.nc, l.js = nc, js
	if !nc.IsConnected() {
		l.log.Warn("nats not reachable at start; serving the cached catalogue and retrying", "url", o.NATSURL)
	}
	return l, nil
}

// OnReconnect registers f to run after every reconnection of a connection
// the participant dialed. A caller's connection keeps its own handlers; the
// catalogue watch re-reads the bucket after a reconnection by itself.
func (l *natsLink) OnReconnect(f func()) {
	l.mu.Lock()
	l.onReconnect = append(l.onReconnect, f)
	l.mu.Unlock()
}

// close closes what the participant opened.
func (l *natsLink) close() {
	if l.owned && l.nc != nil {
		// Drain would wait on an unreachable server; Close is enough, the
		// catalogue watch and the reporter have stopped.
		l.nc.Close()
	}
	l.stopEmbedded()
}

func (l *natsLink) stopEmbedded() {
	if l.embedded != nil {
		l.embedded.Stop()
	}
}
