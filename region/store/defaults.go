package store

import "time"

// Defaults that the limiter (region.Config), the ledger reporter
// (ledger.Config) and billing (billing.Config) share, declared here alone,
// in the contract every one of them imports, as MaxKeyLen is: each
// Config's default names these.
const (
	// DefaultWindow is the accounting window's length: usage is counted
	// per key in windows this long, and the reporter and billing must use
	// the limiters' window.
	DefaultWindow = time.Minute
	// DefaultRegion is the region's name when none is given.
	DefaultRegion = "local"
)
