package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger"
)

// Store is where the Reconciler writes. Writer is the Postgres
// implementation. The Reconciler calls it from one goroutine at a time.
type Store interface {
	// Write writes a batch of reports idempotently; when it fails, it may
	// have written part of the batch (the Writer's parts, see
	// WriterConfig.Parallel), which writing the batch again makes
	// harmless.
	Write(ctx context.Context, reports []ledger.Report) (WriteResult, error)
	// DeadLetter records messages that will not be written, atomically and
	// idempotently (a redelivered letter is recorded once).
	DeadLetter(ctx context.Context, letters []DeadLetter) error
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
	// Regions, when set, restricts the reconciler to the reports of these
	// regions (subjects <prefix>.<region>.>), to split the stream between
	// reconcilers: one per region, or any partition of the region set,
	// each with its own Durable, all writing one ledger (the Writer's
	// primary-key order keeps them free of deadlocks). The regions of
	// different Durables must not overlap: a work-queue stream refuses the
	// second consumer (the reconciler stays not ready and logs why), as a
	// report leaves the stream once one of them acknowledges it. More
	// than one region needs NATS 2.10 or later (a consumer's
	// FilterSubjects). Default none: every region.
	Regions []string
	// BatchSize is the most reports written in one transaction, and about
	// how many are gathered before writing: gathering stops once the
	// messages decoded so far hold BatchSize reports, counted as decoded
	// (not as a message's ledger.HeaderReports claims), so a batch holds
	// at most BatchSize + ledger.MaxBatchReports − 1 decoded reports (a
	// batch message is never split across gatherings). Default 5000.
	BatchSize int
	// MaxReportAge is how far before now a report's window may start: an
	// older report is dead-lettered (ReasonTooOld), not written. It bounds
	// the months one batch can touch (each needs a partition) and keeps
	// reports out of months billing has closed. Keep it within the
	// retention (reconciler retention --keep-months): a report for a month
	// retention detached is dead-lettered anyway (ReasonDetached). 0 is no
	// bound. Default 93 days (about three months: a spool replayed after a
	// long outage still lands).
	MaxReportAge time.Duration
	// MaxReportSkew is how far after now a report's window may start (a
	// sender's clock ahead of ours): a later one is dead-lettered
	// (ReasonFuture). 0 is no bound. Default 1h.
	MaxReportSkew time.Duration
	// RefundHorizon is how far back a refund reaches: a report may refund
	// what its row spent and was charged plus what its key's other rows
	// of its region, with windows starting at most RefundHorizon before
	// its own, net (boundRefunds). A limiter records a refund in the
	// window and on the process that handle it, for a request it took up
	// to its idempotency horizon before: set it to the limiters'
	// idempotency horizon (region.Config.IdempotencyHorizon). It is what
	// a stolen limiter credential can refund: that region's last
	// RefundHorizon of a key's net. 0 bounds a refund by its own row.
	// Default DefaultRefundHorizon.
	RefundHorizon time.Duration
	// Clock tells the time MaxReportAge and MaxReportSkew are measured
	// from, and paces everything the Reconciler waits for: a batch's
	// BatchInterval, the backoff between failed writes and binds, keeping
	// a batch's messages in progress, and the idle check. Tests pass a
	// clock.Manual. Default the system clock.
	Clock clock.Clock
	// PullBytes bounds the bytes of messages the consumer buffers ahead of
	// the reconciler. It must exceed the largest message (NATS'
	// max_payload, 1 MiB by default). Default 32 MiB.
	PullBytes int
	// BatchInterval is the longest a batch waits to fill. Default 200ms.
	BatchInterval time.Duration
	// AckWait is how long JetStream waits for an ack before redelivering.
	// While a batch is being retried its messages are kept in progress.
	// Default 30s.
	AckWait time.Duration
	// RetryMin and RetryMax bound the exponential backoff between failed
	// writes. Defaults 100ms and 10s.
	RetryMin, RetryMax time.Duration
	// WriteTimeout bounds one Store.Write on the wall clock (it bounds
	// I/O): a write that hangs fails, is logged as an error and retried,
	// rather than stalling the consumer in silence. Default 30s.
	WriteTimeout time.Duration
	// ParkDelay is how long a report that Postgres will not take now,
	// while it takes others, waits on the stream before it is delivered
	// again (its message is handed back; the rest of the batch is
	// written). Default 1m.
	ParkDelay time.Duration
	// Logger receives errors; nil discards.
	Logger *slog.Logger
	// Metrics, when set, are updated; see NewMetrics.
	Metrics *Metrics
	// Tracer, when set, gets a span per gathered batch
	// ("quota.reconcile.batch": messages, reports, dead letters) with a
	// child per transaction ("quota.reconcile.write": reports, rows
	// inserted and updated, retries). nil traces nothing.
	Tracer trace.Tracer
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Stream:        ledger.DefaultStreamConfig(),
		Durable:       "reconciler",
		BatchSize:     5000,
		MaxReportAge:  93 * 24 * time.Hour,
		MaxReportSkew: time.Hour,
		RefundHorizon: DefaultRefundHorizon,
		Clock:         clock.System(),
		PullBytes:     32 << 20,
		BatchInterval: 200 * time.Millisecond,
		AckWait:       30 * time.Second,
		RetryMin:      100 * time.Millisecond,
		RetryMax:      10 * time.Second,
		WriteTimeout:  30 * time.Second,
		ParkDelay:     time.Minute,
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
	for i, r := range c.Regions {
		check(r != "" && !strings.ContainsAny(r, ".*> \t\r\n"), fmt.Sprintf("Regions[%d]", i),
			"%q is not a subject token (no '.', '*', '>' or white space)", r)
		check(!slices.Contains(c.Regions[:i], r), fmt.Sprintf("Regions[%d]", i), "%q appears twice", r)
	}
	check(c.BatchSize >= 1, "BatchSize", "must be at least 1, got %d", c.BatchSize)
	check(c.MaxReportAge >= 0, "MaxReportAge", "must be 0 (no bound) or positive, got %v", c.MaxReportAge)
	check(c.MaxReportSkew >= 0, "MaxReportSkew", "must be 0 (no bound) or positive, got %v", c.MaxReportSkew)
	check(c.RefundHorizon >= 0 && c.RefundHorizon <= MaxRefundHorizon, "RefundHorizon", "must be 0 (own row only) to %v, got %v", MaxRefundHorizon, c.RefundHorizon)
	check(c.PullBytes >= 2<<20, "PullBytes", "must be at least 2 MiB, got %d", c.PullBytes)
	check(c.BatchInterval > 0, "BatchInterval", "must be positive, got %v", c.BatchInterval)
	check(c.AckWait >= time.Second, "AckWait", "must be at least 1s, got %v", c.AckWait)
	check(c.RetryMin > 0, "RetryMin", "must be positive, got %v", c.RetryMin)
	check(c.RetryMax >= c.RetryMin, "RetryMax", "must be at least RetryMin, got %v", c.RetryMax)
	check(c.WriteTimeout >= 100*time.Millisecond, "WriteTimeout", "must be at least 100ms, got %v", c.WriteTimeout)
	check(c.ParkDelay > 0, "ParkDelay", "must be positive, got %v", c.ParkDelay)
	return errors.Join(errs...)
}

// Reconciler consumes usage reports and writes them to a Store.
type Reconciler struct {
	cfg    Config
	js     jetstream.JetStream
	store  Store
	m      *Metrics
	log    *slog.Logger
	health health
	// filledAt is when noteFill last read the stream; only Run's goroutine
	// uses it.
	filledAt time.Time
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
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	r := &Reconciler{cfg: cfg, js: js, store: store, m: cfg.Metrics, log: cfg.Logger}
	r.health.consuming(errNotStarted)
	return r, nil
}

// DefaultRefundHorizon is Config.RefundHorizon's default: the limiters'
// default idempotency horizon (region.DefaultIdempotencyHorizon, which
// the reconciler does not link; a test keeps them equal).
const DefaultRefundHorizon = 24 * time.Hour

// MaxRefundHorizon bounds Config.RefundHorizon: each refund beyond its
// row reads that much of its key's history.
const MaxRefundHorizon = 31 * 24 * time.Hour

var errNotStarted = errors.New("reconcile: not started")

// Ready returns nil while the Reconciler consumes (its durable consumer is
// bound) and its last write did not fail transiently (Postgres reachable),
// else the reason it is not ready.
func (r *Reconciler) Ready() error { return r.health.ready() }

// Run consumes until ctx is cancelled, and returns nil then. A batch being
// written or retried when ctx ends is not acknowledged: JetStream
// redelivers it to the next reconciler after AckWait, and the upsert makes
// that harmless.
//
// When the durable consumer is lost (deleted, or its stream deleted), Run
// is not ready until it has created it again (Config.Durable, delivering
// every report the stream still holds: those not acknowledged, or on a
// stream of limits retention all of them; the upsert makes a replay
// harmless) and consumes from it. Acknowledging a report, once the ledger
// holds it, removes it from a work-queue stream.
func (r *Reconciler) Run(ctx context.Context) error {
	defer r.health.consuming(errors.New("reconcile: stopped"))
	for {
		err := r.consume(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.m.Rebinds.Inc()
		r.health.consuming(fmt.Errorf("reconcile: consumer lost, re-binding: %w", err))
		r.log.Warn("reconcile: consumer lost; re-binding", "err", err, "durable", r.cfg.Durable)
		if !r.sleep(ctx, r.cfg.RetryMin) {
			return nil
		}
	}
}

// consume binds the durable consumer and processes its batches until ctx
// ends (it returns nil) or the consumer is lost (it returns why).
func (r *Reconciler) consume(ctx context.Context) error {
	cons, err := r.bind(ctx)
	if err != nil {
		return err // ctx ended
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(r.cfg.PullBytes))
	if err != nil {
		return fmt.Errorf("reconcile: consume: %w", err)
	}
	defer func() { it.Stop() }()
	r.health.consuming(nil)

	var msgs []gathered
	lastMsg := r.cfg.Clock.Now()
	for ctx.Err() == nil {
		var lost error
		clear(msgs) // let the last batch's reports go while gathering
		msgs, lost = r.gather(ctx, it, msgs[:0])
		if len(msgs) > 0 {
			lastMsg = r.cfg.Clock.Now()
			r.noteOldest(msgs)
			if err := r.process(ctx, msgs); err != nil {
				return nil // ctx ended: the rest of the batch is not acked
			}
		}
		if lost != nil {
			return lost
		}
		r.noteFill(ctx)
		if now := r.cfg.Clock.Now(); len(msgs) == 0 && now.Sub(lastMsg) >= idleCheck {
			lastMsg = now
			restart, err := r.checkIdle(ctx, cons)
			if err != nil {
				return err
			}
			if restart {
				it.Stop()
				if it, err = cons.Messages(jetstream.PullMaxBytes(r.cfg.PullBytes)); err != nil {
					return fmt.Errorf("reconcile: consume: %w", err)
				}
			}
		}
	}
	return nil
}

// consumerLost reports whether err from the pull iterator or the consumer
// means the consumer is gone (or the iterator stopped for good): the
// Reconciler must bind again.
func consumerLost(err error) bool {
	for _, target := range [...]error{jetstream.ErrConsumerDeleted, jetstream.ErrConsumerNotFound,
		jetstream.ErrStreamNotFound, jetstream.ErrMsgIteratorClosed, jetstream.ErrBadRequest, jetstream.ErrNoHeartbeat} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// idleCheck is how long the consumer may deliver nothing before the
// reconciler asks the server whether reports are waiting.
const idleCheck = 5 * time.Second

// checkIdle reads the consumer's state while nothing arrives: it keeps the
// lag metric true when idle, reports whether the pull iterator must be
// restarted because reports wait on the server that no pull is fetching
// (a pull request lost on the way, e.g. across a gateway), and returns an
// error when the consumer is gone.
func (r *Reconciler) checkIdle(ctx context.Context, cons jetstream.Consumer) (restart bool, lost error) {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := cons.Info(ictx)
	if err != nil {
		if consumerLost(err) {
			return false, fmt.Errorf("reconcile: consumer info: %w", err)
		}
		return false, nil
	}
	r.m.Lag.Set(float64(info.NumPending))
	r.noteCaughtUp(info)
	if info.NumPending > 0 && info.NumAckPending == 0 && info.NumWaiting == 0 {
		r.log.Warn("reconcile: reports are waiting but none is delivered; restarting the pull", "pending", info.NumPending)
		return true, nil
	}
	return false, nil
}

// bind creates (or updates) the stream and the durable consumer, retrying
// with backoff; it fails only when ctx ends.
func (r *Reconciler) bind(ctx context.Context) (jetstream.Consumer, error) {
	backoff := r.cfg.RetryMin
	for {
		_, err := ledger.EnsureStream(ctx, r.js, r.cfg.Stream)
		if err == nil {
			var cons jetstream.Consumer
			cc := jetstream.ConsumerConfig{
				Durable:       r.cfg.Durable,
				Description:   "usage reports into the Postgres ledger",
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       r.cfg.AckWait,
				DeliverPolicy: jetstream.DeliverAllPolicy,
				MaxAckPending: 4 * r.cfg.BatchSize,
				MaxDeliver:    -1,
			}
			// One subject as FilterSubject, which servers before 2.10
			// know; several need 2.10's FilterSubjects.
			if subjects := r.filterSubjects(); len(subjects) == 1 {
				cc.FilterSubject = subjects[0]
			} else {
				cc.FilterSubjects = subjects
			}
			cons, err = r.js.CreateOrUpdateConsumer(ctx, r.cfg.Stream.Name, cc)
			if err == nil {
				return cons, nil
			}
		}
		r.health.consuming(fmt.Errorf("reconcile: binding the consumer: %w", err))
		r.log.Warn("reconcile: binding the consumer failed; retrying", "err", err, "backoff", backoff)
		if !r.sleep(ctx, backoff) {
			return nil, fmt.Errorf("reconcile: bind consumer: %w", err)
		}
		backoff = min(2*backoff, r.cfg.RetryMax)
	}
}

// filterSubjects are the consumer's subjects: the stream's, or with
// Config.Regions one per region.
func (r *Reconciler) filterSubjects() []string {
	if len(r.cfg.Regions) == 0 {
		return []string{r.cfg.Stream.SubjectPrefix + ".>"}
	}
	out := make([]string, len(r.cfg.Regions))
	for i, reg := range r.cfg.Regions {
		out[i] = r.cfg.Stream.SubjectPrefix + "." + reg + ".>"
	}
	return out
}

// gathered is a message of a batch, decoded and checked (check).
type gathered struct {
	m      jetstream.Msg
	good   []checked
	bad    []badReport
	reason Reason // with err: the message is refused whole
	err    error
}

// decode checks message m against the window of accepted starts at now.
func (r *Reconciler) decode(m jetstream.Msg, now time.Time) gathered {
	var win window
	if r.cfg.MaxReportAge > 0 {
		win.oldest = now.Add(-r.cfg.MaxReportAge)
	}
	if r.cfg.MaxReportSkew > 0 {
		win.newest = now.Add(r.cfg.MaxReportSkew)
	}
	g := gathered{m: m}
	if err := checkMsgID(r.cfg.Stream.SubjectPrefix, m.Subject(), m.Headers().Get(nats.MsgIdHdr)); err != nil {
		g.reason, g.err = ReasonSubject, err
		return g
	}
	g.good, g.bad, g.reason, g.err = check(r.cfg.Stream.SubjectPrefix, m.Subject(), m.Headers().Get(ledger.HeaderEncoding), m.Data(), win)
	return g
}

// reports is how many reports the message decoded into (1 when refused
// whole).
func (g *gathered) reports() int {
	if g.err != nil {
		return 1
	}
	return len(g.good) + len(g.bad)
}

// gather collects and decodes messages until they hold BatchSize reports
// as decoded, waiting at most BatchInterval after the call (or until ctx
// ends). Reports are counted as decoded, not as a message's
// ledger.HeaderReports says: the header is the sender's word, and a small
// message may hold ledger.MaxBatchReports reports. It returns the messages
// it has and, when the consumer is lost, why.
func (r *Reconciler) gather(ctx context.Context, it jetstream.MessagesContext, batch []gathered) ([]gathered, error) {
	bctx, cancel := r.withTimeout(ctx, r.cfg.BatchInterval)
	defer cancel()
	for reports := 0; reports < r.cfg.BatchSize; {
		m, err := it.Next(jetstream.NextContext(bctx))
		if err != nil {
			if bctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				if consumerLost(err) {
					return batch, fmt.Errorf("reconcile: next message: %w", err)
				}
				r.log.Warn("reconcile: next message", "err", err)
				<-bctx.Done() // pace retries of a broken iterator
			}
			break
		}
		g := r.decode(m, r.cfg.Clock.Now())
		batch = append(batch, g)
		reports += g.reports()
	}
	return batch, nil
}

// sleep waits d on the Clock; false when ctx ended first.
func (r *Reconciler) sleep(ctx context.Context, d time.Duration) bool {
	t := r.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// withTimeout is context.WithTimeout on the Clock: the context is
// cancelled d after the call, or when ctx ends or cancel is called.
// cancel stops the timer before it returns, so that a test's
// clock.Manual counts only the timers still waited on.
func (r *Reconciler) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	t := r.cfg.Clock.NewTimer(d)
	go func() {
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		t.Stop()
		cancel()
	}
}
