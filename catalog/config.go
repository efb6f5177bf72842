package catalog

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/internal/natsname"
	"github.com/quotaplatform/quota/limit"
)

// Config configures a Catalog. Start from DefaultConfig; New validates a copy.
type Config struct {
	// Bucket is the JetStream key-value bucket holding the catalogue.
	// Default "quota-catalog".
	Bucket string
	// History is how many revisions of each entry the bucket keeps, for
	// "who changed what and when" (1–64). Default 64.
	History int
	// Replicas is the bucket's replication factor when this process creates
	// it. Default 1; use 3 on a clustered NATS.
	Replicas int
	// Cluster is the NATS cluster (region name) the bucket is placed in
	// when this process creates it (jetstream.Placement). Empty: wherever
	// the creating client is connected. The deploy sets the ledger region.
	// An existing bucket's replicas and placement are never changed; when
	// they differ from Replicas and Cluster, the Logger hears so once at
	// info. Default "".
	Cluster string
	// ReadOnly: this process is not the control plane (its NATS user may
	// only read the bucket). It never creates the bucket, waiting for the
	// control plane to, and its writes fail with ErrReadOnly. Default false.
	ReadOnly bool

	// CachePath is the file holding the last known good catalogue, written
	// after every applied change and read by New. Empty disables the cache.
	// Default "" (the daemon sets <data-dir>/catalog.json).
	CachePath string

	// DefaultPlan is the built-in default plan: used for keys with no
	// assignment while the bucket holds no plan named "default". A zero Plan
	// means there is none, and such keys have no plan. Default zero.
	DefaultPlan limit.Plan

	// WriteTimeout bounds one write: the KV put and the wait for this
	// process's watch to apply it. Default 2s.
	WriteTimeout time.Duration
	// RetryInterval is how long the watch waits before trying the bucket
	// again after NATS failed. Default 500ms.
	RetryInterval time.Duration

	// Logger receives watch and cache events. Default slog.Default().
	Logger *slog.Logger
	// Tracer, when set, gets a span per write ("quota.catalog.write": the
	// kind and the revision; no name, as a key assignment's name is a key)
	// and per push applied ("quota.catalog.push": the version, whether it
	// was the initial load, whether every key was invalidated, how many
	// keys changed). Default nil: no spans.
	Tracer trace.Tracer
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Bucket:        "quota-catalog",
		History:       64,
		Replicas:      1,
		WriteTimeout:  2 * time.Second,
		RetryInterval: 500 * time.Millisecond,
	}
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("catalog: config %s: "+format, append([]any{field}, args...)...))
		}
	}
	check(c.Bucket != "", "Bucket", "must not be empty")
	check(c.History >= 1 && c.History <= 64, "History", "must be in [1, 64], got %d", c.History)
	check(c.Replicas >= 1, "Replicas", "must be at least 1, got %d", c.Replicas)
	if err := natsname.CheckCluster(c.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("catalog: config Cluster: %w", err))
	}
	check(c.WriteTimeout > 0, "WriteTimeout", "must be positive, got %v", c.WriteTimeout)
	check(c.RetryInterval > 0, "RetryInterval", "must be positive, got %v", c.RetryInterval)
	if c.DefaultPlan != (limit.Plan{}) {
		if err := c.DefaultPlan.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("catalog: config DefaultPlan: %w", err))
		}
	}
	return errors.Join(errs...)
}
