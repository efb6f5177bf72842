package ledger

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/field"
	"github.com/quotaplatform/quota/region/store"
)

// Config configures a Reporter. Start from DefaultConfig; NewReporter
// validates a copy.
type Config struct {
	// Region of this process; reports go to Stream.Subject(Region, process).
	// Default store.DefaultRegion ("local").
	Region string
	// ProcessID names this process in the ledger. Required. Reports are
	// cumulative per process, so the ledger's process_id must be unique per
	// process lifetime: see AppendIncarnation.
	ProcessID string
	// AppendIncarnation, when true, reports as ProcessID + "@" + the
	// Reporter's creation time (unix ms, base 36), so that a restarted
	// process that reuses its ProcessID (a container's host-pid is often
	// host-1) never adds to the rows of its previous life. Default true.
	AppendIncarnation bool
	// Window is the accounting window length; it must equal the Limiter's
	// region.Config.Window. Default store.DefaultWindow (60s).
	Window time.Duration
	// ReportInterval is how often cumulative reports are published.
	// Default 5s.
	ReportInterval time.Duration
	// FinalGrace is how long after a window's end its final report waits
	// for the Limiter's last delta. It must exceed the Limiter's flush
	// interval. Default 2s.
	FinalGrace time.Duration
	// Retention is how long a window's counters stay in memory after its
	// final report was accepted, so that a late delta is added to them.
	// A delta arriving later still is reported under a separate process row
	// (ProcessID + "~late…"), so that nothing is lost. Default = Window.
	Retention time.Duration
	// Stream names the JetStream stream and subjects. Default
	// DefaultStreamConfig().
	Stream StreamConfig
	// CreateStream lets the Reporter create the stream when it is missing
	// (EnsureStream). Only the reconciler's role creates it: a limiter
	// checks that it exists (CheckStream) and spools its reports until it
	// does. Set it only in a process that owns its NATS server and has no
	// reconciler (the daemon's embedded NATS). Default false.
	CreateStream bool
	// SpoolDir holds the spool file (usage-spool.jsonl). Required.
	SpoolDir string
	// SpoolMaxBytes bounds the spool file. Default 64 MiB.
	SpoolMaxBytes int64
	// PublishTimeout bounds waiting for JetStream to acknowledge a batch of
	// reports; past it the batch goes to the spool. Default 2s.
	PublishTimeout time.Duration
	// PublishBatch is how many messages are in flight at once. Default 1000.
	PublishBatch int
	// Encoding is how reports travel: EncodingBatch (many reports per
	// message, compressed: see EncodeBatch) or EncodingJSON (one JSON
	// report per message, what limiters sent before batching, and all a
	// reconciler older than batching reads: upgrade reconcilers first).
	// Default EncodingBatch.
	Encoding string
	// MaxKeys caps the (key, window) counters the Reporter holds in memory:
	// a key counts once for each accounting window it has usage in (about
	// two per active key: its current window, and the previous one until
	// its final report is accepted and Retention has passed). When a Record
	// leaves MaxKeys or more held, the Reporter flushes at once (on its
	// loop; at the next Flush without Start): it reports every changed
	// window to JetStream, or to the spool while NATS is away, frees the
	// windows whose final report was accepted without waiting for
	// Retention, and reports final and frees the least recently recorded
	// others until MaxKeys/2 are held. A delta that arrives later for a
	// window freed early is reported under a row of its own, as after
	// Retention (ProcessID + "~late…"), so billing, which adds the rows up,
	// still counts it once. (Windows starting no later than the latest one
	// freed early all get such rows: the Reporter keeps no list of what it
	// freed.)
	// Record never blocks, so the Reporter may hold more than MaxKeys until
	// that flush has run: MaxKeys − 1 plus the new windows of the Records
	// that arrive meanwhile (in a daemon, one Limiter flush per
	// region.Config.FlushInterval). It holds more without bound only while
	// neither JetStream nor the spool accepts reports (spool full and NATS
	// away): usage is never dropped. Default 200,000 (twice the Limiter's
	// default MaxKeys).
	MaxKeys int
	// Clock is the time source: it says when a window's final report is due
	// and when Retention has passed, stamps SentAt and the incarnation, and
	// makes the ReportInterval ticker of Start's loop. nil means
	// clock.System(). PublishTimeout is measured on the system clock, as it
	// bounds waiting on the network.
	Clock clock.Clock
	// Logger receives errors (spool full, publish failures); nil discards.
	Logger *slog.Logger
	// Metrics, when set, are updated; see NewMetrics.
	Metrics *Metrics
	// Tracer, when set, gets a span per flush that has something to hand
	// over ("quota.ledger.flush": reports due, messages and reports
	// published, reports spooled). nil traces nothing.
	Tracer trace.Tracer
}

// DefaultConfig returns the documented defaults (ProcessID and SpoolDir
// must still be set).
func DefaultConfig() Config {
	return Config{
		Region:            store.DefaultRegion,
		AppendIncarnation: true,
		Window:            store.DefaultWindow,
		ReportInterval:    5 * time.Second,
		FinalGrace:        2 * time.Second,
		Stream:            DefaultStreamConfig(),
		SpoolMaxBytes:     64 << 20,
		PublishTimeout:    2 * time.Second,
		PublishBatch:      1000,
		Encoding:          EncodingBatch,
		MaxKeys:           200_000,
	}
}

// validate is Validate, for NewReporter.
func (c *Config) validate() error { return c.Validate() }

// Validate checks every field and reports every bad one, each a
// *field.Error naming it (internal/field): Stream's as "Stream.Name".
func (c Config) Validate() error {
	ch := field.Check{Prefix: "ledger: config "}
	check := ch.That
	check(c.Region != "" && len(c.Region) <= MaxIDLen, "Region", "length must be in [1, %d]", MaxIDLen)
	check(c.ProcessID != "" && len(c.ProcessID) <= MaxIDLen-64, "ProcessID", "length must be in [1, %d]", MaxIDLen-64)
	check(c.Window > 0, "Window", "must be positive, got %v", c.Window)
	check(c.ReportInterval > 0, "ReportInterval", "must be positive, got %v", c.ReportInterval)
	check(c.FinalGrace >= 0, "FinalGrace", "must not be negative, got %v", c.FinalGrace)
	check(c.Retention >= 0, "Retention", "must not be negative, got %v", c.Retention)
	check(c.SpoolDir != "", "SpoolDir", "must not be empty")
	check(c.SpoolMaxBytes >= 4096, "SpoolMaxBytes", "must be at least 4096, got %d", c.SpoolMaxBytes)
	check(c.PublishTimeout > 0, "PublishTimeout", "must be positive, got %v", c.PublishTimeout)
	check(c.PublishBatch >= 1, "PublishBatch", "must be at least 1, got %d", c.PublishBatch)
	check(c.Encoding == EncodingBatch || c.Encoding == EncodingJSON, "Encoding", "must be %q or %q, got %q", EncodingBatch, EncodingJSON, c.Encoding)
	check(c.MaxKeys >= 1, "MaxKeys", "must be at least 1, got %d", c.MaxKeys)
	ch.Add(field.Map("", c.Stream.validate(), func(p string) string { return "Stream." + p }))
	return ch.Err()
}
