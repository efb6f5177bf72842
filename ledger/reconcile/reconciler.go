package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/ledger"
)

// Store writes a batch of reports atomically and idempotently. Writer is the
// Postgres implementation.
type Store interface {
	Write(ctx context.Context, reports []ledger.Report) (WriteResult, error)
}

var _ Store = (*Writer)(nil)

// Config configures a Reconciler. Start from DefaultConfig; New validates a
// copy.
type Config struct {
	// Stream names the usage stream. Default ledger.DefaultStreamConfig().
	Stream ledger.StreamConfig
	// Durable is the durable consumer's name. Several reconcilers with the
	// same name share the work. Default "reconciler".
	Durable string
	// BatchSize is the most reports written in one transaction. Default 5000.
	BatchSize int
	// BatchInterval is the longest a batch waits to fill. Default 200ms.
	BatchInterval time.Duration
	// AckWait is how long JetStream waits for an ack before redelivering.
	// While a batch is being retried its messages are kept in progress.
	// Default 30s.
	AckWait time.Duration
	// RetryMin and RetryMax bound the exponential backoff between failed
	// writes. Defaults 100ms and 10s.
	RetryMin, RetryMax time.Duration
	// Logger receives errors; nil discards.
	Logger *slog.Logger
	// Metrics, when set, are updated; see NewMetrics.
	Metrics *Metrics
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Stream:        ledger.DefaultStreamConfig(),
		Durable:       "reconciler",
		BatchSize:     5000,
		BatchInterval: 200 * time.Millisecond,
		AckWait:       30 * time.Second,
		RetryMin:      100 * time.Millisecond,
		RetryMax:      10 * time.Second,
	}
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("reconcile: config %s: "+format, append([]any{field}, args...)...))
		}
	}
	check(c.Durable != "", "Durable", "must not be empty")
	check(c.BatchSize >= 1, "BatchSize", "must be at least 1, got %d", c.BatchSize)
	check(c.BatchInterval > 0, "BatchInterval", "must be positive, got %v", c.BatchInterval)
	check(c.AckWait >= time.Second, "AckWait", "must be at least 1s, got %v", c.AckWait)
	check(c.RetryMin > 0, "RetryMin", "must be positive, got %v", c.RetryMin)
	check(c.RetryMax >= c.RetryMin, "RetryMax", "must be at least RetryMin, got %v", c.RetryMax)
	return errors.Join(errs...)
}

// Reconciler consumes usage reports and writes them to a Store.
type Reconciler struct {
	cfg   Config
	js    jetstream.JetStream
	store Store
	m     *Metrics
	log   *slog.Logger

	ready    atomic.Bool  // consumer bound and last write (if any) succeeded
	lastErr  atomic.Value // string
	commitNs atomic.Int64 // unix ns of the last commit
}

// New returns a Reconciler. It does no I/O until Run.
func New(js jetstream.JetStream, store Store, cfg Config) (*Reconciler, error) {
	if js == nil || store == nil {
		return nil, errors.New("reconcile: New: nil JetStream or Store")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Reconciler{cfg: cfg, js: js, store: store, m: cfg.Metrics, log: cfg.Logger}, nil
}

// Ready returns nil when the consumer is bound and the last write succeeded,
// else the reason it is not ready.
func (r *Reconciler) Ready() error {
	if r.ready.Load() {
		return nil
	}
	if s, _ := r.lastErr.Load().(string); s != "" {
		return errors.New(s)
	}
	return errors.New("reconcile: not started")
}

// Run consumes until ctx is cancelled. A batch being written or retried
// when ctx ends is not acknowledged: JetStream redelivers it to the next
// reconciler after AckWait, and the upsert makes that harmless.
func (r *Reconciler) Run(ctx context.Context) error {
	cons, err := r.bind(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before the consumer was bound
		}
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * r.cfg.BatchSize))
	if err != nil {
		return fmt.Errorf("reconcile: consume: %w", err)
	}
	defer func() { it.Stop() }()
	r.ready.Store(true)

	msgs := make([]jetstream.Msg, 0, r.cfg.BatchSize)
	reps := make([]ledger.Report, 0, r.cfg.BatchSize)
	lastMsg := time.Now()
	for ctx.Err() == nil {
		msgs = r.gather(ctx, it, msgs[:0])
		if len(msgs) == 0 {
			if time.Since(lastMsg) >= idleCheck {
				lastMsg = time.Now()
				if fresh := r.checkIdle(ctx, cons); fresh {
					it.Stop()
					if it, err = cons.Messages(jetstream.PullMaxMessages(2 * r.cfg.BatchSize)); err != nil {
						return fmt.Errorf("reconcile: consume: %w", err)
					}
				}
			}
			continue
		}
		lastMsg = time.Now()
		reps = reps[:0]
		keep := msgs[:0]
		for _, m := range msgs {
			if md, err := m.Metadata(); err == nil {
				if md.NumDelivered > 1 {
					r.m.Redeliveries.Inc()
				}
				r.m.Lag.Set(float64(md.NumPending))
			}
			rep, err := ledger.DecodeReport(m.Data())
			if err != nil {
				r.m.Invalid.Inc()
				r.log.Error("reconcile: dropping invalid report", "subject", m.Subject(), "err", err)
				_ = m.Term()
				continue
			}
			reps = append(reps, rep)
			keep = append(keep, m)
		}
		msgs = keep
		if len(reps) == 0 {
			continue
		}
		if err := r.write(ctx, reps, msgs); err != nil {
			return nil // ctx ended while retrying: nothing acked
		}
		for _, m := range msgs {
			_ = m.Ack()
		}
		r.m.Reports.Add(float64(len(reps)))
	}
	return nil
}

// idleCheck is how long the consumer may deliver nothing before the
// reconciler asks the server whether reports are waiting.
const idleCheck = 5 * time.Second

// checkIdle reads the consumer's state while nothing arrives: it keeps the
// lag metric true when idle, and reports whether the pull iterator must be
// restarted because reports wait on the server that no pull is fetching
// (a pull request lost on the way, e.g. across a gateway).
func (r *Reconciler) checkIdle(ctx context.Context, cons jetstream.Consumer) bool {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := cons.Info(ictx)
	if err != nil {
		return false
	}
	r.m.Lag.Set(float64(info.NumPending))
	if info.NumPending > 0 && info.NumAckPending == 0 && info.NumWaiting == 0 {
		r.log.Warn("reconcile: reports are waiting but none is delivered; restarting the pull", "pending", info.NumPending)
		return true
	}
	return false
}

func (r *Reconciler) bind(ctx context.Context) (jetstream.Consumer, error) {
	backoff := r.cfg.RetryMin
	for {
		_, err := ledger.EnsureStream(ctx, r.js, r.cfg.Stream)
		if err == nil {
			var cons jetstream.Consumer
			cons, err = r.js.CreateOrUpdateConsumer(ctx, r.cfg.Stream.Name, jetstream.ConsumerConfig{
				Durable:       r.cfg.Durable,
				Description:   "usage reports into the Postgres ledger",
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       r.cfg.AckWait,
				DeliverPolicy: jetstream.DeliverAllPolicy,
				FilterSubject: r.cfg.Stream.SubjectPrefix + ".>",
				MaxAckPending: 4 * r.cfg.BatchSize,
				MaxDeliver:    -1,
			})
			if err == nil {
				return cons, nil
			}
		}
		r.lastErr.Store(err.Error())
		r.log.Warn("reconcile: binding the consumer failed; retrying", "err", err, "backoff", backoff)
		if !sleepCtx(ctx, backoff) {
			return nil, fmt.Errorf("reconcile: bind consumer: %w", err)
		}
		backoff = min(2*backoff, r.cfg.RetryMax)
	}
}

// gather collects up to BatchSize messages, waiting at most BatchInterval
// after the call (or until ctx ends).
func (r *Reconciler) gather(ctx context.Context, it jetstream.MessagesContext, msgs []jetstream.Msg) []jetstream.Msg {
	bctx, cancel := context.WithTimeout(ctx, r.cfg.BatchInterval)
	defer cancel()
	for len(msgs) < r.cfg.BatchSize {
		m, err := it.Next(jetstream.NextContext(bctx))
		if err != nil {
			if bctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				r.log.Warn("reconcile: next message", "err", err)
				<-bctx.Done() // pace retries of a broken iterator
			}
			break
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// write retries the batch until it commits or ctx ends.
func (r *Reconciler) write(ctx context.Context, reps []ledger.Report, msgs []jetstream.Msg) error {
	backoff := r.cfg.RetryMin
	started := time.Now()
	lastProgress := started
	for {
		t0 := time.Now()
		res, err := r.store.Write(ctx, reps)
		if err == nil {
			r.m.BatchLatency.Observe(time.Since(t0).Seconds())
			r.m.BatchSize.Observe(float64(len(reps)))
			r.m.Rows.WithLabelValues("inserted").Add(float64(res.Inserted))
			r.m.Rows.WithLabelValues("updated").Add(float64(res.Updated))
			r.m.Rows.WithLabelValues("unchanged").Add(float64(res.Unchanged))
			now := time.Now()
			r.m.LastCommit.Set(float64(now.UnixNano()) / 1e9)
			r.commitNs.Store(now.UnixNano())
			r.ready.Store(true)
			return nil
		}
		r.m.WriteErrors.Inc()
		r.ready.Store(false)
		r.lastErr.Store("reconcile: write: " + err.Error())
		r.log.Error("reconcile: writing batch failed; retrying, nothing acked",
			"err", err, "reports", len(reps), "backoff", backoff, "failing_for", time.Since(started).Round(time.Millisecond))
		if !sleepCtx(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, r.cfg.RetryMax)
		// Keep the batch ours while we retry, so JetStream does not hand
		// it to another reconciler meanwhile.
		if time.Since(lastProgress) > r.cfg.AckWait/3 {
			for _, m := range msgs {
				_ = m.InProgress()
			}
			lastProgress = time.Now()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
