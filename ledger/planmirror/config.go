package planmirror

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quotaplatform/quota/catalog"
)

// Config configures a Mirror. Start from DefaultConfig; New validates a
// copy.
type Config struct {
	// Bucket is the catalogue's JetStream key-value bucket. Default
	// catalog.DefaultConfig().Bucket ("quota-catalog"), the limiters'.
	Bucket string
	// RetryInterval is how long Run waits before reading the bucket again
	// after a failure (NATS, the bucket not created yet, Postgres).
	// Default 1s.
	RetryInterval time.Duration
	// WriteTimeout bounds one transaction: the full state on start, or
	// one burst of changes. Default 30s.
	WriteTimeout time.Duration
	// MaxBatch is the most pushed changes one transaction applies; a
	// longer burst takes several. Default 1,000.
	MaxBatch int
	// Logger gets the watch's events (never an entry's name). Default
	// slog.Default().
	Logger *slog.Logger
	// Metrics, when set, gets the mirror's revision and failures.
	// Default nil: none.
	Metrics *Metrics
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Bucket:        catalog.DefaultConfig().Bucket,
		RetryInterval: time.Second,
		WriteTimeout:  30 * time.Second,
		MaxBatch:      1000,
	}
}

// Validate checks every field and reports every bad one, each naming its
// field.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("planmirror: %s: "+format, append([]any{field}, args...)...))
		}
	}
	check(c.Bucket != "", "Bucket", "must not be empty")
	check(c.RetryInterval > 0, "RetryInterval", "must be positive, got %v", c.RetryInterval)
	check(c.WriteTimeout > 0, "WriteTimeout", "must be positive, got %v", c.WriteTimeout)
	check(c.MaxBatch >= 1, "MaxBatch", "must be at least 1, got %d", c.MaxBatch)
	return errors.Join(errs...)
}
