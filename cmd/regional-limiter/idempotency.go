package main

import (
	"fmt"

	"github.com/quotaplatform/quota/region"
)

// applyIdempotencyHorizon gives the limiter --idempotency-horizon: how long
// the region's store remembers a request_id (docs/design.md
// [idempotency]). The participant builds the limiter's configuration
// without it, so it is set on the limiter before any start hook runs.
func applyIdempotencyHorizon(lim *region.Limiter, o Options) error {
	if err := lim.SetIdempotencyHorizon(o.IdempotencyHorizon); err != nil {
		return fmt.Errorf("--idempotency-horizon: %w", err)
	}
	return nil
}
