package gossip

import "github.com/quotaplatform/quota/region"

// A Node is a region.Limiter's ShareSource. The assertion lives in a test
// so that gossip need not import the engine.
var _ region.ShareSource = (*Node)(nil)
