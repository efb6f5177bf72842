package limitapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/region"
)

// Limiter is what the API needs of a region.Limiter.
type Limiter interface {
	Allow(ctx context.Context, key string, cost int64) (region.Decision, error)
	EndpointCost(endpoint string) (int64, error)
	Peek(key string) (region.KeyState, error)
}

// Requests is what request ids need of a region.Limiter (docs/design.md
// [idempotency]): checks with a request_id, POST /v1/refund and
// /v1/charge. When Config.Limiter is not one, those answer 501.
type Requests interface {
	AllowRequest(ctx context.Context, key string, cost int64, requestID string) (region.Decision, error)
	Refund(ctx context.Context, key string, cost int64, requestID string) (region.Adjustment, error)
	Charge(ctx context.Context, key string, cost int64, requestID string) (region.Adjustment, error)
}

// Catalog is what the API needs of a catalog.Catalog.
type Catalog interface {
	Resolve(key string) (string, region.Plan, error)
	PlanEntry(name string) (catalog.Entry, bool)
	Assignment(key string) (catalog.Entry, bool)
	CostEntry(endpoint string) (catalog.Entry, bool)
	PutPlan(ctx context.Context, actor, name string, p region.Plan) (uint64, error)
	Assign(ctx context.Context, actor, key, plan string) (uint64, error)
	PutCost(ctx context.Context, actor, endpoint string, cost int64) (uint64, error)
	Delete(ctx context.Context, actor string, kind catalog.Kind, name string) (uint64, error)
	History(ctx context.Context, kind catalog.Kind, name string) ([]catalog.Entry, error)
}

// ShareView is what GET /v1/keys/{key} shows of the regions' shares (the
// gossip node).
type ShareView interface {
	// Shares returns every region's share of key's global limit.
	Shares(key string) map[string]float64
	// SharesAge is the time since the shares were last computed.
	SharesAge() time.Duration
}

// CheckObserver times single checks by the path of their decision.
type CheckObserver interface {
	ObserveCheck(path region.Path, d time.Duration)
}

// Config configures the API. Limiter and Catalog are required.
type Config struct {
	Limiter Limiter
	Catalog Catalog
	// Checks, when set, is told how long each single check took to serve
	// (handler start to response written) and on which path it was
	// decided. Default nil.
	Checks CheckObserver

	// AdminToken is the bearer token control-plane writes must carry; it
	// may also read (AccessRead). Empty refuses every write (403). Default
	// "".
	AdminToken string
	// CheckTokens are the bearer tokens of the check API (POST /v1/allow,
	// /v1/allow/batch), several for rotation. Empty leaves the check API
	// open to anyone. Each is as bearer.Check says. Default none.
	CheckTokens []string
	// ReadTokens are bearer tokens that may read (GET /v1/keys/{key},
	// /v1/limits/{plan}, /v1/costs/{endpoint}, and the daemon's /debug/
	// routes) but not write. The admin token reads too; with neither, reads
	// are refused (403). Each is as bearer.Check says. Default none.
	ReadTokens []string
	// HistoryRate and HistoryBurst bound the ?history=1 reads of each
	// caller (each read or admin token): HistoryRate a second on average,
	// HistoryBurst at once; past that they answer 429 with Retry-After.
	// Defaults 2 and 5.
	HistoryRate  float64
	HistoryBurst int
	// AdminActor is the name recorded as the writer of changes made with
	// AdminToken, for history. Default "admin".
	AdminActor string
	// ReadOnly: this process is not the control plane, and its NATS user
	// may not write the catalogue. Writes (AccessAdmin routes) that pass
	// the token check answer 403, saying where writes go; reads are
	// unchanged. Default false.
	ReadOnly bool

	// MaxBodyBytes caps the body of a single check and of a control-plane
	// write. Default 4 KiB.
	MaxBodyBytes int64
	// MaxBatchBytes caps the body of a batch check. Default 1 MiB.
	MaxBatchBytes int64
	// MaxBatch caps the checks in one batch. Default 1000.
	MaxBatch int

	// Shares, when set, adds the regions' shares of a key and their age to
	// GET /v1/keys/{key}. Default nil.
	Shares ShareView

	// Logger receives unexpected errors. Default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the documented defaults (without Limiter and
// Catalog).
func DefaultConfig() Config {
	return Config{
		AdminActor:    "admin",
		HistoryRate:   2,
		HistoryBurst:  5,
		MaxBodyBytes:  4 << 10,
		MaxBatchBytes: 1 << 20,
		MaxBatch:      1000,
	}
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("limitapi: config %s: "+format, append([]any{field}, args...)...))
		}
	}
	check(c.Limiter != nil, "Limiter", "must not be nil")
	check(c.Catalog != nil, "Catalog", "must not be nil")
	check(c.AdminActor != "", "AdminActor", "must not be empty")
	check(c.MaxBodyBytes >= 512, "MaxBodyBytes", "must be at least 512, got %d", c.MaxBodyBytes)
	check(c.MaxBatchBytes >= c.MaxBodyBytes, "MaxBatchBytes", "must be at least MaxBodyBytes, got %d", c.MaxBatchBytes)
	check(c.MaxBatch >= 1, "MaxBatch", "must be at least 1, got %d", c.MaxBatch)
	check(c.HistoryRate > 0, "HistoryRate", "must be positive, got %v", c.HistoryRate)
	check(c.HistoryBurst >= 1, "HistoryBurst", "must be at least 1, got %d", c.HistoryBurst)
	for _, list := range []struct {
		field  string
		tokens []string
	}{{"CheckTokens", c.CheckTokens}, {"ReadTokens", c.ReadTokens}} {
		var bad *bearer.EntryError
		if errors.As(bearer.CheckList(list.tokens), &bad) {
			check(false, fmt.Sprintf("%s[%d]", list.field, bad.Index), "%v", bad.Err)
		}
	}
	return errors.Join(errs...)
}
