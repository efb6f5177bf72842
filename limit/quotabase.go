package limit

import (
	"context"
	"time"
)

// QuotaBase is what the ledger holds of one key's spending in one quota
// period, [Start, End): the base a region's quota counter is re-based on
// (docs/design.md [quotas]).
type QuotaBase struct {
	// Total is the fleet's spent cost in the period, every region's.
	Total int64
	// ByRegion is each region's spent cost in the period; a region with
	// none is absent.
	ByRegion map[string]int64
	// AsOf is when the ledger was read.
	AsOf time.Time
}

// QuotaBases reads quota bases from the ledger. The reconciler answers
// them (ledger/quotabase); a Limiter without one counts a quota from what
// its region's store holds alone.
type QuotaBases interface {
	// QuotaBase returns key's spent cost in the usage windows that start
	// in [start, end). An error means the ledger could not be read now.
	QuotaBase(ctx context.Context, key string, start, end time.Time) (QuotaBase, error)
}
