package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/field"
	"github.com/quotaplatform/quota/internal/natsname"
)

// Stream defaults shared by the Reporter and the reconciler.
const (
	// DefaultStream is the JetStream stream that holds usage reports.
	DefaultStream = "QUOTA_USAGE"
	// DefaultSubjectPrefix is the subject prefix of usage reports; a report
	// of process P in region R is published on
	// DefaultSubjectPrefix + "." + R + "." + P.
	DefaultSubjectPrefix = "quota.usage"
	// DefaultDuplicateWindow is how long the stream remembers message IDs.
	DefaultDuplicateWindow = 10 * time.Minute
	// DefaultStreamMaxBytes is the usage stream's byte limit: at about
	// 300 bytes a report, some 3.5 million unconsumed reports.
	DefaultStreamMaxBytes = 1 << 30
)

// StreamConfig names the usage stream.
type StreamConfig struct {
	// Name of the stream. Default DefaultStream.
	Name string
	// SubjectPrefix: reports go to SubjectPrefix.<region>.<process>.
	// Default DefaultSubjectPrefix.
	SubjectPrefix string
	// DuplicateWindow is the stream's message-ID memory. Default
	// DefaultDuplicateWindow.
	DuplicateWindow time.Duration
	// MaxAge bounds how long reports are kept, consumed or not: 0 is no
	// age limit. A report past MaxAge is deleted whether the reconciler
	// has written it or not, which would lose billed usage, so leave it 0:
	// the stream is bounded by MaxBytes, and the age of the oldest report
	// the reconciler has not written is alerted on
	// (quota_reconciler_oldest_unwritten_report_timestamp_seconds).
	// Default 0.
	MaxAge time.Duration
	// Replicas of the stream in a clustered JetStream. Default 1.
	Replicas int
	// Cluster is the NATS cluster (region name) the stream is placed in
	// when EnsureStream creates it: jetstream.Placement{Cluster: Cluster}.
	// Empty: wherever the creating client is connected. The deploy sets
	// the ledger region. Default "".
	Cluster string
	// MaxBytes bounds the stream's size. A full stream refuses new
	// reports (DiscardNew), never dropping old ones: publishers keep
	// theirs in the spool and retry, and the refusals are an error of
	// their Flush (ErrStreamFull) and show in
	// quota_ledger_stream_full_total. Default DefaultStreamMaxBytes.
	MaxBytes int64
	// Retention is how reports leave the stream. jetstream.WorkQueuePolicy
	// (the default): once the reconciler acknowledges a report (after the
	// ledger committed it), so the stream holds only what is unwritten.
	// jetstream.LimitsPolicy keeps written reports until MaxBytes refuses
	// publishers: accepted only for a stream created before work-queue
	// retention, until MigrateStream replaces it. Interest retention is
	// refused: it drops a report published while no consumer exists.
	Retention jetstream.RetentionPolicy
	// Logger receives one info line when the stream exists with other
	// replicas or another cluster than Replicas and Cluster (it is left as
	// it is). nil discards.
	Logger *slog.Logger
}

// DefaultStreamConfig returns the documented defaults.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{
		Name:            DefaultStream,
		SubjectPrefix:   DefaultSubjectPrefix,
		DuplicateWindow: DefaultDuplicateWindow,
		Replicas:        1,
		MaxBytes:        DefaultStreamMaxBytes,
		Retention:       jetstream.WorkQueuePolicy,
	}
}

// validate is Validate, for the Reporter and EnsureStream.
func (c *StreamConfig) validate() error { return c.Validate() }

// Validate checks every field and reports every bad one, each a
// *field.Error naming it (internal/field).
func (c StreamConfig) Validate() error {
	ch := field.Check{Prefix: "ledger: stream config "}
	check := ch.That
	check(c.Name != "", "Name", "must not be empty")
	check(c.SubjectPrefix != "", "SubjectPrefix", "must not be empty")
	check(c.DuplicateWindow > 0, "DuplicateWindow", "must be positive, got %v", c.DuplicateWindow)
	check(c.MaxAge == 0 || c.MaxAge >= c.DuplicateWindow, "MaxAge", "must be 0 (no age limit) or at least DuplicateWindow, got %v", c.MaxAge)
	// 5: JetStream's most replicas.
	check(c.Replicas >= 1 && c.Replicas <= 5, "Replicas", "must be 1 to 5, got %d", c.Replicas)
	check(c.MaxBytes >= 1<<20, "MaxBytes", "must be at least 1 MiB, got %d", c.MaxBytes)
	check(c.Retention == jetstream.WorkQueuePolicy || c.Retention == jetstream.LimitsPolicy, "Retention", "must be WorkQueue or Limits, got %v", c.Retention)
	err := CheckClusterName(c.Cluster)
	check(err == nil, "Cluster", "%v", err)
	return ch.Err()
}

// CheckClusterName returns an error when name, not empty, cannot be a NATS
// cluster name (natsname.CheckCluster).
func CheckClusterName(name string) error { return natsname.CheckCluster(name) }

// Subject returns the subject a report of process in region is published
// on: <prefix>.<region>.<Identity(process)>. Every incarnation and late row
// of one process goes on that process's subject, which its own NATS
// credential alone may publish on (internal/natsconf, Params.Processes), and
// the reconciler checks the report names that process.
func (c StreamConfig) Subject(region, process string) string {
	return c.SubjectPrefix + "." + region + "." + Identity(process)
}

// Identity is the process a report's ProcessID belongs to, as its subject
// names it: the ProcessID without a late row's suffix ("~late…") and
// without the incarnation the Reporter appends ("@<start>", see
// Config.AppendIncarnation). A process's credential is bound to its
// identity (a pod name), not to one incarnation, which NATS permissions
// could not name (a wildcard is a whole subject token).
func Identity(process string) string {
	process = subjectProcess(process)
	if i := strings.LastIndexByte(process, '@'); i > 0 {
		return process[:i]
	}
	return process
}

// lateMark starts the suffix of a late row's process ID.
const lateMark = "~late"

// EnsureStream returns the usage stream, creating it from cfg when it is
// missing, with cfg.Replicas placed in cfg.Cluster. Only the reconciler's
// role calls it (and a limiter that owns its embedded NATS server, which
// has no reconciler): limiters only check that it exists (CheckStream).
//
// An existing stream is never changed. Its limits and retention must be
// cfg's (MaxAge, MaxBytes, DuplicateWindow, Retention, DiscardNew, no
// message-count limits), or EnsureStream returns an error wrapping
// ErrStreamMismatch that names the setting: a stream that deletes reports
// by age or count, or drops the oldest when full, would lose billed usage
// that no one consumed. A stream MigrateStream is replacing
// (MigratingKey) is returned whatever its limits. One difference is let
// through: a stream with
// limits retention where cfg says work queue, created before work-queue
// retention (JetStream cannot change a retention to or from work queue in
// place). It keeps written reports until it is full, so cfg.Logger hears
// once, at warn, that it must be migrated (MigrateStream). Its replicas
// and placement are the operator's: when they differ from cfg's,
// cfg.Logger hears so once (per logger and difference) at info. Its subjects must cover cfg's, or reports would be
// refused: that is an error too.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		info := s.CachedInfo()
		if err := checkSubjects(info.Config, cfg); err != nil {
			return nil, err
		}
		if info.Config.Metadata[MigratingKey] != "" {
			return s, nil // closed by MigrateStream: reconcilers drain it
		}
		noteDifferences(info, cfg)
		noteLegacy(info.Config, cfg)
		return s, checkLimits(info.Config, cfg)
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("ledger: look up stream %s: %w", cfg.Name, err)
	}
	var placement *jetstream.Placement
	if cfg.Cluster != "" {
		placement = &jetstream.Placement{Cluster: cfg.Cluster}
	}
	s, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Name,
		Description: "quota usage reports (cumulative per key, window, process)",
		Subjects:    []string{cfg.SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   cfg.Retention,
		MaxAge:      cfg.MaxAge,
		Duplicates:  cfg.DuplicateWindow,
		Replicas:    cfg.Replicas,
		Placement:   placement,
		MaxBytes:    cfg.MaxBytes,
		MaxMsgs:     -1,
		Discard:     jetstream.DiscardNew,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return EnsureStream(ctx, js, cfg) // another process created it meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: create stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// ErrStreamMismatch: the usage stream exists with limits or a retention
// other than the configuration's (EnsureStream).
var ErrStreamMismatch = errors.New("ledger: the usage stream's limits differ from the configuration")

// ErrStreamFull: the usage stream refused reports for want of space
// (MaxBytes or the account's storage, with DiscardNew). The reports wait in
// the spool (or memory), and nothing reaches the ledger until the
// reconciler frees space by writing what the stream holds, or an operator
// raises the limit: Flush returns it, wrapped with the count.
var ErrStreamFull = errors.New("ledger: the usage stream is full and refuses reports")

// isStreamFull reports whether a publish error is JetStream refusing the
// message for the stream's or the account's storage limit.
func isStreamFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	d := strings.ToLower(apiErr.Description)
	return strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "exceeds max bytes") ||
		strings.Contains(d, "resource limits exceeded") || strings.Contains(d, "insufficient resources")
}

// checkLimits returns an error wrapping ErrStreamMismatch that names every
// limit or retention setting of have that differs from cfg's.
func checkLimits(have jetstream.StreamConfig, cfg StreamConfig) error {
	var diffs []string
	differs := func(setting, got, want string) {
		diffs = append(diffs, fmt.Sprintf("%s is %s, the configuration says %s", setting, got, want))
	}
	age := func(d time.Duration) string {
		if d == 0 {
			return "0 (no age limit)"
		}
		return d.String()
	}
	if have.MaxAge != cfg.MaxAge {
		differs("MaxAge (max_age)", age(have.MaxAge), age(cfg.MaxAge))
	}
	if have.MaxBytes != cfg.MaxBytes {
		differs("MaxBytes (max_bytes)", fmt.Sprint(have.MaxBytes), fmt.Sprint(cfg.MaxBytes))
	}
	if have.Duplicates != cfg.DuplicateWindow {
		differs("DuplicateWindow (duplicate_window)", have.Duplicates.String(), cfg.DuplicateWindow.String())
	}
	if have.Retention != cfg.Retention && !legacyRetention(have, cfg) {
		differs("retention", have.Retention.String(), cfg.Retention.String())
	}
	if have.Discard != jetstream.DiscardNew {
		differs("discard", have.Discard.String(), jetstream.DiscardNew.String())
	}
	if have.MaxMsgs > 0 {
		differs("max_msgs", fmt.Sprint(have.MaxMsgs), "-1 (none)")
	}
	if have.MaxMsgsPerSubject > 0 {
		differs("max_msgs_per_subject", fmt.Sprint(have.MaxMsgsPerSubject), "-1 (none)")
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: stream %s: %s; edit the stream (nats stream edit %s) or the configuration to agree",
		ErrStreamMismatch, cfg.Name, strings.Join(diffs, "; "), cfg.Name)
}

// legacyRetention reports whether a stream configured as have keeps written
// reports only because it predates work-queue retention: limits retention
// where cfg says work queue. MigrateStream replaces it.
func legacyRetention(have jetstream.StreamConfig, cfg StreamConfig) bool {
	return have.Retention == jetstream.LimitsPolicy && cfg.Retention == jetstream.WorkQueuePolicy
}

// noteLegacy warns once (per logger and stream) that the stream keeps
// written reports.
func noteLegacy(have jetstream.StreamConfig, cfg StreamConfig) {
	if cfg.Logger == nil || !legacyRetention(have, cfg) {
		return
	}
	if _, dup := noted.LoadOrStore(notedKey{cfg.Logger, cfg.Name, "legacy retention"}, struct{}{}); dup {
		return
	}
	cfg.Logger.Warn("ledger: the usage stream keeps reports the ledger holds (limits retention) and fills up; replace it: reconciler stream-migrate",
		"stream", cfg.Name)
}

// CheckStream returns nil when the usage stream exists and takes cfg's
// subjects, an error wrapping jetstream.ErrStreamNotFound when it is
// missing. It never creates or changes the stream: a limiter calls it, and
// spools its reports until the reconciler has created the stream.
func CheckStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) error {
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		return fmt.Errorf("ledger: look up stream %s: %w", cfg.Name, err)
	}
	return checkSubjects(s.CachedInfo().Config, cfg)
}

// checkSubjects reports an existing stream whose subjects do not take
// reports under cfg's prefix.
func checkSubjects(have jetstream.StreamConfig, cfg StreamConfig) error {
	for _, s := range have.Subjects {
		if s == cfg.SubjectPrefix+".>" || s == ">" {
			return nil
		}
	}
	return fmt.Errorf("ledger: stream %s takes subjects %q, not %q: reports would be refused; add the subject to the stream", cfg.Name, have.Subjects, cfg.SubjectPrefix+".>")
}

// noted holds the differences already logged, by logger, stream and
// difference, so that a reconciler binding again after every lost consumer
// says it once.
var noted sync.Map // notedKey → struct{}

type notedKey struct {
	log               *slog.Logger
	stream, differing string
}

// noteDifferences logs, once, how an existing stream's replicas and
// cluster differ from cfg's. Nothing is changed: they are the operator's.
func noteDifferences(info *jetstream.StreamInfo, cfg StreamConfig) {
	if cfg.Logger == nil || info == nil {
		return
	}
	var diffs []string
	if have := info.Config.Replicas; have != cfg.Replicas && !(have == 0 && cfg.Replicas == 1) {
		diffs = append(diffs, fmt.Sprintf("replicas %d (this process's setting: %d)", have, cfg.Replicas))
	}
	if cfg.Cluster != "" {
		if have := streamCluster(info); have != cfg.Cluster {
			diffs = append(diffs, fmt.Sprintf("cluster %q (this process's setting: %q)", have, cfg.Cluster))
		}
	}
	if len(diffs) == 0 {
		return
	}
	differing := strings.Join(diffs, ", ")
	if _, dup := noted.LoadOrStore(notedKey{cfg.Logger, cfg.Name, differing}, struct{}{}); dup {
		return
	}
	cfg.Logger.Info("ledger: the usage stream exists with other settings; leaving them as they are (an operator's, never downgraded)",
		"stream", cfg.Name, "differs", differing)
}

// streamCluster is the cluster a stream lives in: the one its leader
// reports, else its placement's; "" on a JetStream that is not clustered.
func streamCluster(info *jetstream.StreamInfo) string {
	if info.Cluster != nil && info.Cluster.Name != "" {
		return info.Cluster.Name
	}
	if info.Config.Placement != nil {
		return info.Config.Placement.Cluster
	}
	return ""
}
