package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream defaults shared by the Reporter and the reconciler.
const (
	// DefaultStream is the JetStream stream that holds usage reports.
	DefaultStream = "QUOTA_USAGE"
	// DefaultSubjectPrefix is the subject prefix of usage reports; a report
	// from region R is published on DefaultSubjectPrefix + "." + R.
	DefaultSubjectPrefix = "quota.usage"
	// DefaultDuplicateWindow is how long the stream remembers message IDs.
	DefaultDuplicateWindow = 10 * time.Minute
)

// StreamConfig names the usage stream.
type StreamConfig struct {
	// Name of the stream. Default DefaultStream.
	Name string
	// SubjectPrefix: reports go to SubjectPrefix.<region>. Default
	// DefaultSubjectPrefix.
	SubjectPrefix string
	// DuplicateWindow is the stream's message-ID memory. Default
	// DefaultDuplicateWindow.
	DuplicateWindow time.Duration
	// MaxAge bounds how long unconsumed reports are kept. Default 7 days.
	MaxAge time.Duration
	// Replicas of the stream in a clustered JetStream. Default 1.
	Replicas int
}

// DefaultStreamConfig returns the documented defaults.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{
		Name:            DefaultStream,
		SubjectPrefix:   DefaultSubjectPrefix,
		DuplicateWindow: DefaultDuplicateWindow,
		MaxAge:          7 * 24 * time.Hour,
		Replicas:        1,
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
	}
	return nil
}

// Subject returns the subject a region's reports are published on.
func (c StreamConfig) Subject(region string) string { return c.SubjectPrefix + "." + region }

// EnsureStream creates the usage stream, or updates it to cfg, and returns
// it. Both the Reporter's owner and the reconciler call it, so either may
// start first.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Name,
		Description: "quota usage reports (cumulative per key, window, process)",
		Subjects:    []string{cfg.SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.MaxAge,
		Duplicates:  cfg.DuplicateWindow,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: ensure stream %s: %w", cfg.Name, err)
	}
	return s, nil
}
