package membership

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a Membership. Start from DefaultConfig; New validates a
// copy.
type Config struct {
	// NodeName identifies this process (flag --process-id); unique in the
	// region. Required.
	NodeName string
	// BindAddr and BindPort are where memberlist listens, UDP and TCP
	// (flag --memberlist-bind, host:port; see SplitHostPort). Port 0 picks
	// a free one (see Membership.Addr). Default 127.0.0.1:0.
	BindAddr string
	BindPort int
	// AdvertiseAddr/AdvertisePort, when set, are announced to other members
	// instead of the bind address (for NAT and containers).
	AdvertiseAddr string
	AdvertisePort int
	// Join lists host:port of existing members (flag --memberlist-join).
	// Empty starts a new cluster. Start succeeds if any one answers.
	Join []string
	// Keys encrypt and authenticate every memberlist message, UDP and TCP
	// (flag --memberlist-key): AES-GCM with Keys[0]; a message is accepted
	// if any key opens it, so a rotation adds the new key second, then
	// moves it first, then drops the old one, one rolling restart each.
	// Messages that no key opens, and unencrypted ones, are refused: a
	// process without a shared key cannot join and is not counted. Each
	// key is 16, 24 or 32 bytes (AES-128, -192, -256). Empty means
	// plaintext: anyone who reaches BindAddr can join and change the
	// count.
	Keys []Key
	// LeaveTimeout bounds the leave broadcast on Stop. Default 1s.
	LeaveTimeout time.Duration
	// OnChange, when set, is called with the new live count after a member
	// joins, leaves or is declared dead.
	OnChange func(processes int)
	// Logger receives memberlist's log lines at debug level; nil discards.
	Logger *slog.Logger
	// Tune, when set, may adjust the memberlist configuration (built from
	// memberlist.DefaultLocalConfig) before Start, e.g. for faster failure
	// detection in tests.
	Tune func(*memberlist.Config)
}

// DefaultConfig returns the documented defaults; NodeName must still be set.
func DefaultConfig() Config {
	return Config{BindAddr: "127.0.0.1", LeaveTimeout: time.Second}
}

// SplitHostPort parses a host:port flag value into BindAddr and BindPort.
func SplitHostPort(hostport string) (string, int, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("membership: address %q: %w", hostport, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("membership: address %q: bad port", hostport)
	}
	return host, p, nil
}

// Membership is this process's view of its region's processes.
type Membership struct {
	cfg Config

	// startMu serialises Start and Stop. mu guards list and is never held
	// while calling into memberlist, whose event callbacks (run during
	// Create, Join and Leave) read list through Processes.
	startMu sync.Mutex
	mu      sync.Mutex
	list    *memberlist.Memberlist // nil until Start and after Stop; guarded by mu
	// alive holds the names of live members, this one included, as told by
	// memberlist's events. Counted here rather than with NumMembers because
	// memberlist calls the events with its node lock held. Guarded by mu.
	alive map[string]struct{}

	// retry is the background join of a Start whose join failed: closed
	// stop ends it, done says it has ended. Both nil when not running;
	// guarded by startMu.
	retryStop chan struct{}
	retryDone chan struct{}
}

// New validates cfg. It starts nothing: call Start.
func New(cfg Config) (*Membership, error) {
	var errs []error
	if cfg.NodeName == "" {
		errs = append(errs, errors.New("membership: config NodeName: must not be empty"))
	}
	if cfg.BindAddr == "" {
		errs = append(errs, errors.New("membership: config BindAddr: must not be empty"))
	}
	if cfg.BindPort < 0 || cfg.BindPort > 65535 {
		errs = append(errs, fmt.Errorf("membership: config BindPort: %d out of range", cfg.BindPort))
	}
	if cfg.LeaveTimeout <= 0 {
		errs = append(errs, fmt.Errorf("membership: config LeaveTimeout: must be positive, got %v", cfg.LeaveTimeout))
	}
	for i, k := range cfg.Keys {
		if err := k.check(); err != nil {
			errs = append(errs, fmt.Errorf("membership: config Keys[%d]: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.Join = append([]string(nil), cfg.Join...)
	keys := make([]Key, len(cfg.Keys))
	for i, k := range cfg.Keys {
		keys[i] = append(Key(nil), k...)
	}
	cfg.Keys = keys
	return &Membership{cfg: cfg, alive: map[string]struct{}{}}, nil
}

// Start creates the memberlist and joins Config.Join (if any). When nobody
// in Join answers, it runs alone and retries the join every second in the
// background until it succeeds or Stop.
func (m *Membership) Start() error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.mu.Lock()
	started := m.list != nil
	m.mu.Unlock()
	if started {
		return errors.New("membership: already started")
	}
	mc := memberlist.DefaultLocalConfig()
	mc.Name = m.cfg.NodeName
	mc.BindAddr, mc.BindPort = m.cfg.BindAddr, m.cfg.BindPort
	mc.AdvertiseAddr, mc.AdvertisePort = m.cfg.AdvertiseAddr, m.cfg.AdvertisePort
	if m.cfg.Logger != nil {
		mc.Logger = log.New(slogWriter{m.cfg.Logger.With("component", "memberlist")}, "", 0)
	} else {
		mc.LogOutput = io.Discard
	}
	mc.Events = &events{m: m}
	if err := m.encrypt(mc); err != nil {
		return err
	}
	if m.cfg.Tune != nil {
		m.cfg.Tune(mc)
	}
	list, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("membership: start on %s:%d: %w", m.cfg.BindAddr, m.cfg.BindPort, err)
	}
	m.mu.Lock()
	m.list = list
	m.mu.Unlock()
	if len(m.cfg.Join) > 0 {
		if _, err := list.Join(m.cfg.Join); err != nil {
			// The first process of a region, or a whole region restarting,
			// finds nobody to join: run alone and keep trying, so that the
			// processes find each other as they come up.
			if m.cfg.Logger != nil {
				m.cfg.Logger.Warn("membership: join failed; running alone and retrying", "join", m.cfg.Join, "err", err)
			}
			m.retryStop, m.retryDone = make(chan struct{}), make(chan struct{})
			go m.retryJoin(list, m.retryStop, m.retryDone)
		}
	}
	return nil
}

// joinRetry is how often a failed join is tried again.
const joinRetry = time.Second

func (m *Membership) retryJoin(list *memberlist.Memberlist, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(joinRetry)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if _, err := list.Join(m.cfg.Join); err == nil {
				if m.cfg.Logger != nil {
					m.cfg.Logger.Info("membership: joined", "join", m.cfg.Join)
				}
				return
			}
		}
	}
}

// Stop leaves the cluster (so others stop counting this process at once)
// and shuts memberlist down. It is safe to call twice.
func (m *Membership) Stop() error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	if m.retryStop != nil {
		close(m.retryStop)
		<-m.retryDone
		m.retryStop, m.retryDone = nil, nil
	}
	m.mu.Lock()
	list := m.list
	m.list = nil
	m.mu.Unlock()
	if list == nil {
		return nil
	}
	lerr := list.Leave(m.cfg.LeaveTimeout)
	serr := list.Shutdown()
	return errors.Join(lerr, serr)
}

// Processes implements region.ProcessCounter: the live members, this
// process included; at least 1 (also before Start and after Stop).
func (m *Membership) Processes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.list == nil || len(m.alive) < 1 {
		return 1
	}
	return len(m.alive)
}

// Addr returns the address memberlist listens on (host:port), for others
// to join; empty before Start.
func (m *Membership) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.list == nil {
		return ""
	}
	n := m.list.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

func (m *Membership) changed(name string, alive bool) {
	m.mu.Lock()
	if alive {
		m.alive[name] = struct{}{}
	} else {
		delete(m.alive, name)
	}
	n := len(m.alive)
	m.mu.Unlock()
	if m.cfg.OnChange != nil {
		if n < 1 {
			n = 1
		}
		m.cfg.OnChange(n)
	}
}

// events keeps the live set and forwards changes to OnChange. memberlist
// calls it with its node lock held: it must not call back into memberlist.
type events struct{ m *Membership }

func (e *events) NotifyJoin(n *memberlist.Node)  { e.m.changed(n.Name, true) }
func (e *events) NotifyLeave(n *memberlist.Node) { e.m.changed(n.Name, false) }
func (e *events) NotifyUpdate(*memberlist.Node)  {}

// slogWriter turns memberlist's log lines into slog debug records.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := string(p)
	if len(msg) > 0 && msg[len(msg)-1] == '\n' {
		msg = msg[:len(msg)-1]
	}
	w.l.Debug(msg)
	return len(p), nil
}
