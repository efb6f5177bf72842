package quotabase

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/limit"
)

// Ledger is what a Server reads bases from: pgledger.Ledger, on the
// Postgres ledger.
type Ledger interface {
	// SpentByRegion returns key's spent cost in the usage windows that
	// start in [start, end), by region (net of refunds, with post-hoc
	// charges: what billing charges). ctx carries the query's deadline.
	SpentByRegion(ctx context.Context, key string, start, end time.Time) (map[string]int64, error)
}

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Subject is the NATS subject requests arrive on. Default
	// DefaultSubject ("quota.base").
	Subject string
	// Queue is the queue group the Servers share requests in: each request
	// goes to one Server of the group. Default DefaultQueue ("quota-base").
	Queue string
	// StatementTimeout bounds each query: as a context deadline, and as
	// the statement_timeout of the connections pgledger.NewPool opens.
	// Default 2s.
	StatementTimeout time.Duration
	// MaxConcurrent is the most queries running at once; a request past it
	// is answered "busy" at once. pgledger.NewPool sizes its pool to it.
	// Default 4.
	MaxConcurrent int
	// Logger gets errors (never a key above debug level). Default
	// slog.Default().
	Logger *slog.Logger
	// Metrics, when set, counts requests. Default nil: none.
	Metrics *Metrics
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{Subject: DefaultSubject, Queue: DefaultQueue, StatementTimeout: 2 * time.Second, MaxConcurrent: 4}
}

// Validate checks every field and reports every bad one, each naming its
// field.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("quotabase: %s: "+format, append([]any{field}, args...)...))
		}
	}
	check(CheckSubject(c.Subject) == nil, "Subject", "%v", CheckSubject(c.Subject))
	check(c.Queue != "" && !strings.ContainsAny(c.Queue, " \t\r\n*>"), "Queue", "must be a queue group name (no spaces or wildcards), got %q", c.Queue)
	check(c.StatementTimeout >= time.Millisecond, "StatementTimeout", "must be at least 1ms, got %v", c.StatementTimeout)
	check(c.MaxConcurrent >= 1, "MaxConcurrent", "must be at least 1, got %d", c.MaxConcurrent)
	return errors.Join(errs...)
}

// CheckSubject returns an error unless subject can carry requests: a NATS
// subject of non-empty tokens without wildcards or spaces.
func CheckSubject(subject string) error {
	if subject == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsAny(subject, " \t\r\n*>") {
		return fmt.Errorf("%q is not a subject to publish on: no spaces or wildcards", subject)
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" {
			return fmt.Errorf("%q is not a subject: an empty token", subject)
		}
	}
	return nil
}

// Server answers quota-base requests from the ledger. Build it with
// NewServer, Start it, Stop it.
type Server struct {
	nc     *nats.Conn
	ledger Ledger
	cfg    Config
	log    *slog.Logger
	m      *Metrics

	slots chan struct{} // one per running query

	base   context.Context // the queries' parent; cancelled by Stop
	cancel context.CancelFunc

	mu      sync.Mutex
	sub     *nats.Subscription // guarded by mu
	stopped bool               // guarded by mu
	running sync.WaitGroup     // queries; Add under mu while not stopped

	lastWarn atomic.Int64 // unix ns of the last warning of a failed query
	failed   atomic.Int64 // failed queries not yet in a warning
}

// warnEvery spaces the warnings of failed queries: while Postgres is down
// every request fails.
const warnEvery = 10 * time.Second

// NewServer returns a Server answering requests on nc from ledger
// (pgledger.New on the migrated ledger database). It subscribes nothing
// until Start.
func NewServer(nc *nats.Conn, ledger Ledger, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if nc == nil || ledger == nil {
		return nil, errors.New("quotabase: NewServer needs a NATS connection and a ledger")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Server{
		nc: nc, ledger: ledger, cfg: cfg, log: cfg.Logger.With("component", "quotabase"), m: cfg.Metrics,
		slots: make(chan struct{}, cfg.MaxConcurrent), base: base, cancel: cancel,
	}, nil
}

// Start subscribes to Config.Subject in Config.Queue. It does not wait for
// NATS: on a connection that is reconnecting, the subscription is made when
// it is back.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return errors.New("quotabase: server stopped")
	case s.sub != nil:
		return nil
	}
	sub, err := s.nc.QueueSubscribe(s.cfg.Subject, s.cfg.Queue, s.receive)
	if err != nil {
		return fmt.Errorf("quotabase: subscribe %s in queue %s: %w", s.cfg.Subject, s.cfg.Queue, err)
	}
	s.sub = sub
	s.log.Info("answering quota-base requests", "subject", s.cfg.Subject, "queue", s.cfg.Queue,
		"max_concurrent", s.cfg.MaxConcurrent, "statement_timeout", s.cfg.StatementTimeout)
	return nil
}

// Stop unsubscribes (requests not yet received go to the group's other
// Servers, or time out at their clients) and waits for the running
// queries to answer; when ctx ends first, it cancels them (their requests
// are answered with an error) and waits for that. Stop is idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	sub := s.sub
	s.stopped = true
	s.mu.Unlock()
	var err error
	if sub != nil && sub.IsValid() {
		if uerr := sub.Unsubscribe(); uerr != nil && !errors.Is(uerr, nats.ErrConnectionClosed) && !errors.Is(uerr, nats.ErrBadSubscription) {
			err = fmt.Errorf("quotabase: unsubscribe: %w", uerr)
		}
	}
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel()
		<-done
	}
	s.cancel()
	return err
}

// receive runs on the subscription's goroutine: it validates the request,
// takes a query slot or answers busy, and hands the query to a goroutine
// of its own, so that a slow query never holds up the next request.
func (s *Server) receive(msg *nats.Msg) {
	arrived := time.Now()
	if msg.Reply == "" {
		return // nobody to answer
	}
	key, start, end, err := parseRequest(msg.Data)
	if err != nil {
		var fe *FieldError
		errors.As(err, &fe)
		s.m.Requests.WithLabelValues(ResultInvalid).Inc()
		s.log.Debug("invalid quota-base request", "field", fe.Field, "err", fe.Msg)
		s.respond(msg, Reply{Error: fe.Msg, Field: fe.Field})
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.m.Requests.WithLabelValues(ResultBusy).Inc()
		s.respond(msg, Reply{Error: msgBusy})
		return
	}
	s.mu.Lock()
	if s.stopped { // Stop is under way: no new query
		s.mu.Unlock()
		<-s.slots
		s.m.Requests.WithLabelValues(ResultError).Inc()
		s.respond(msg, Reply{Error: msgUnavailable})
		return
	}
	s.running.Add(1)
	s.mu.Unlock()
	s.m.InFlight.Inc()
	go func() {
		defer func() {
			s.m.InFlight.Dec()
			<-s.slots
			s.running.Done()
		}()
		s.answer(msg, arrived, key, start, end)
	}()
}

// answer queries the ledger and replies.
func (s *Server) answer(msg *nats.Msg, arrived time.Time, key string, start, end time.Time) {
	base, err := s.read(key, start, end)
	s.m.Latency.Observe(time.Since(arrived).Seconds())
	if err != nil {
		s.m.Requests.WithLabelValues(ResultError).Inc()
		failed := s.failed.Add(1)
		if now := time.Now().UnixNano(); now-s.lastWarn.Load() >= int64(warnEvery) && now-s.lastWarn.Swap(now) >= int64(warnEvery) {
			// At most one warning per warnEvery, however many fail.
			s.failed.Add(-failed)
			s.log.Warn("quota-base queries fail; their requests are answered with an error", "err", err, "failed", failed)
		}
		s.log.Debug("quota-base query failed", "key", key, "start", start, "end", end, "err", err)
		s.respond(msg, Reply{Error: msgUnavailable})
		return
	}
	s.m.Requests.WithLabelValues(ResultOK).Inc()
	s.respond(msg, Reply{Total: base.Total, ByRegion: base.ByRegion, AsOf: base.AsOf})
}

// read reads key's base in [start, end) under Config.StatementTimeout.
func (s *Server) read(key string, start, end time.Time) (limit.QuotaBase, error) {
	ctx, cancel := context.WithTimeout(s.base, s.cfg.StatementTimeout)
	defer cancel()
	out := limit.QuotaBase{AsOf: time.Now().UTC()}
	byRegion, err := s.ledger.SpentByRegion(ctx, key, start, end)
	if err != nil {
		return limit.QuotaBase{}, err
	}
	for r, spent := range byRegion {
		// A region's base is what it spent, never less than nothing (a
		// Ledger that nets refunds per region could go below), and the
		// total saturates rather than wraps.
		spent = max(spent, 0)
		out.Total = min(out.Total, math.MaxInt64-spent) + spent
		if spent != 0 {
			if out.ByRegion == nil {
				out.ByRegion = make(map[string]int64, len(byRegion))
			}
			out.ByRegion[r] = spent
		}
	}
	return out, nil
}

// respond sends r as msg's reply; a failure is logged (the client times
// out).
func (s *Server) respond(msg *nats.Msg, r Reply) {
	data, err := json.Marshal(r)
	if err != nil { // cannot happen: every field encodes
		s.log.Error("quota-base reply", "err", err)
		return
	}
	if err := msg.Respond(data); err != nil {
		s.log.Warn("quota-base reply not sent", "err", err)
	}
}
