package region

import "github.com/quotaplatform/quota/limit"

// Usage is what one process did with one key in one accounting window since
// the previous Usage for that key and window: see limit.Usage.
type Usage = limit.Usage

// UsageSink receives usage deltas from the Limiter's background loop (Run)
// and from Flush: see limit.UsageSink.
type UsageSink = limit.UsageSink
