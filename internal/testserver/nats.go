package testserver

import (
	"net"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// NATS is an in-process NATS server with JetStream.
type NATS struct {
	Server *natsserver.Server
	URL    string
	opts   *natsserver.Options
}

// NATSOptions adjusts StartNATS. Zero values pick a random port and a
// temporary store directory.
type NATSOptions struct {
	Port     int    // 0: random
	StoreDir string // "": t.TempDir()
	// Configure, when set, may change the server options before start
	// (cluster, gateway, leaf node settings).
	Configure func(*natsserver.Options)
}

// StartNATS starts an in-process NATS server with JetStream on a random
// loopback port and shuts it down when the test ends.
func StartNATS(t testing.TB) *NATS { return StartNATSWith(t, NATSOptions{}) }

// StartNATSWith is StartNATS with options.
func StartNATSWith(t testing.TB, o NATSOptions) *NATS {
	t.Helper()
	opts := &natsserver.Options{
		Host:      "127.0.0.1",
		Port:      natsserver.RANDOM_PORT,
		JetStream: true,
		StoreDir:  o.StoreDir,
		NoLog:     true,
		NoSigs:    true,
	}
	if o.Port != 0 {
		opts.Port = o.Port
	}
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	if o.Configure != nil {
		o.Configure(opts)
	}
	n := &NATS{opts: opts}
	n.start(t)
	t.Cleanup(n.Stop)
	return n
}

func (n *NATS) start(t testing.TB) {
	t.Helper()
	s, err := natsserver.NewServer(n.opts)
	if err != nil {
		t.Fatalf("testserver: nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("testserver: nats server not ready within 10s")
	}
	n.Server = s
	n.URL = s.ClientURL()
	// Pin the port so that Restart comes back on the same URL.
	if a, ok := s.Addr().(*net.TCPAddr); ok {
		n.opts.Port = a.Port
	}
}

// Stop shuts the server down and waits for it. It is safe to call twice.
func (n *NATS) Stop() {
	if n.Server == nil {
		return
	}
	n.Server.Shutdown()
	n.Server.WaitForShutdown()
	n.Server = nil
}

// Restart starts the server again on the same port and store directory, so
// JetStream state survives.
func (n *NATS) Restart(t testing.TB) {
	t.Helper()
	n.Stop()
	n.start(t)
}
