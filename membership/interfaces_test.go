package membership

import "github.com/quotaplatform/quota/region"

// A Membership is a region.Limiter's ProcessCounter. The assertion lives
// in a test so that membership need not import the engine.
var _ region.ProcessCounter = (*Membership)(nil)
