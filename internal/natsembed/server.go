package natsembed

import (
	"fmt"
	"net"
	"strconv"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config configures the embedded server.
type Config struct {
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// Listen is the client address ("127.0.0.1:4222"); "" opens no port and
	// only in-process clients can connect. Default "".
	Listen string
	// ServerName names the server in JetStream. Default "quota-embedded".
	ServerName string
	// ReadyTimeout bounds Start's wait for the server. Default 10s.
	ReadyTimeout time.Duration
}

// DefaultConfig returns the documented defaults (without StoreDir).
func DefaultConfig() Config {
	return Config{ServerName: "quota-embedded", ReadyTimeout: 10 * time.Second}
}

// Server is an embedded NATS server with JetStream.
type Server struct {
	cfg Config
	srv *natsserver.Server
}

// New returns a server, not yet started.
func New(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("natsembed: config StoreDir must not be empty")
	}
	if cfg.ServerName == "" {
		return nil, fmt.Errorf("natsembed: config ServerName must not be empty")
	}
	if cfg.ReadyTimeout <= 0 {
		return nil, fmt.Errorf("natsembed: config ReadyTimeout must be positive, got %v", cfg.ReadyTimeout)
	}
	opts := &natsserver.Options{
		ServerName: cfg.ServerName,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		DontListen: cfg.Listen == "",
		NoSigs:     true,
		NoLog:      true,
	}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("natsembed: config Listen %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("natsembed: config Listen %q: port: %w", cfg.Listen, err)
		}
		opts.Host, opts.Port = host, p
	}
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	return &Server{cfg: cfg, srv: srv}, nil
}

// Start starts the server and waits until it accepts clients.
func (s *Server) Start() error {
	go s.srv.Start()
	if !s.srv.ReadyForConnections(s.cfg.ReadyTimeout) {
		s.srv.Shutdown()
		return fmt.Errorf("natsembed: server not ready within %v", s.cfg.ReadyTimeout)
	}
	return nil
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// ConnectOption makes nats.Connect use an in-process connection to s.
func (s *Server) ConnectOption() nats.Option { return nats.InProcessServer(s.srv) }

// ClientURL is the server's client URL ("" when it opens no port).
func (s *Server) ClientURL() string {
	if s.cfg.Listen == "" {
		return ""
	}
	return s.srv.ClientURL()
}
