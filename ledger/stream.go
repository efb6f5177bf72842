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
	// MaxAge bounds how long unconsumed reports are kept. Default 7 days.
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
	// theirs in the spool and retry, and the refusals show in
	// quota_ledger_publish_errors_total. Default DefaultStreamMaxBytes.
	MaxBytes int64
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
		MaxAge:          7 * 24 * time.Hour,
		Replicas:        1,
		MaxBytes:        DefaultStreamMaxBytes,
	}
}

func (c *StreamConfig) validate() error {
	switch {
	case c.Name == "":
		return errors.New("ledger: stream config Name: must not be empty")
	case c.SubjectPrefix == "":
		return errors.New("ledger: stream config SubjectPrefix: must not be empty")
	case c.DuplicateWindow <= 0:
		return fmt.Errorf("ledger: stream config DuplicateWindow: must be positive, got %v", c.DuplicateWindow)
	case c.MaxAge < c.DuplicateWindow:
		return fmt.Errorf("ledger: stream config MaxAge: must be at least DuplicateWindow, got %v", c.MaxAge)
	case c.Replicas < 1:
		return fmt.Errorf("ledger: stream config Replicas: must be at least 1, got %d", c.Replicas)
	case c.MaxBytes < 1<<20:
		return fmt.Errorf("ledger: stream config MaxBytes: must be at least 1 MiB, got %d", c.MaxBytes)
	}
	if err := CheckClusterName(c.Cluster); err != nil {
		return fmt.Errorf("ledger: stream config Cluster: %w", err)
	}
	return nil
}

// CheckClusterName returns an error when name, not empty, cannot be a NATS
// cluster name (natsname.CheckCluster).
func CheckClusterName(name string) error { return natsname.CheckCluster(name) }

// Subject returns the subject a report of process in region is published
// on. A late row ("<process>~late…") goes on its base process's subject,
// and a spooled report of an earlier incarnation on that incarnation's, so
// that the subject always names the process that wrote the report (the
// reconciler checks it).
func (c StreamConfig) Subject(region, process string) string {
	return c.SubjectPrefix + "." + region + "." + subjectProcess(process)
}

// lateMark starts the suffix of a late row's process ID.
const lateMark = "~late"

// EnsureStream returns the usage stream, creating it from cfg when it is
// missing, with cfg.Replicas placed in cfg.Cluster. An existing stream is
// never changed: its replicas, placement, limits and age are the
// operator's. When its replicas or cluster differ from cfg's, cfg.Logger
// hears so once (per logger and difference) at info. Its subjects must
// cover cfg's, or reports would be refused: that is an error. Both the
// Reporter's owner and the reconciler call it, so either may start first.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		noteDifferences(s.CachedInfo(), cfg)
		return s, checkSubjects(s.CachedInfo().Config, cfg)
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
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.MaxAge,
		Duplicates:  cfg.DuplicateWindow,
		Replicas:    cfg.Replicas,
		Placement:   placement,
		MaxBytes:    cfg.MaxBytes,
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
