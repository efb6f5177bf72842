package ledger_test

import (
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/region"
)

// The Reporter is a region.Limiter's durable usage sink. The assertion
// lives in a test so that ledger, which the reconciler links, does not
// import the engine.
var _ region.DurableUsageSink = (*ledger.Reporter)(nil)
