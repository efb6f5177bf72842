package billing_test

import (
	"os"
	"time"

	"github.com/quotaplatform/quota/ledger/billing"
)

// The CSV answer of GET /v1/usage with Accept: text/csv: a line per bucket
// and a total.
func ExampleWriteCSV() {
	h := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	res := billing.Result{Key: "acct_123", Granularity: billing.Hour, Complete: false, IsDegraded: true,
		Totals: billing.Totals{Net: 45, Leased: 50, Degraded: 4, OverAuthorized: 5, Allowed: 45},
		Rows: []billing.Row{
			{Start: h, End: h.Add(time.Hour), Totals: billing.Totals{Net: 22, Leased: 26, OverAuthorized: 4, Allowed: 22}, Windows: 2, Complete: true},
			{Start: h.Add(time.Hour), End: h.Add(2 * time.Hour), Totals: billing.Totals{Net: 23, Leased: 24, Degraded: 4, OverAuthorized: 1, Allowed: 23}, Windows: 2, IsDegraded: true},
		}}
	_ = billing.WriteCSV(os.Stdout, res)
	// Output:
	// key,start,end,net,leased,rejected,degraded_cost,over_authorized,windows,degraded,complete,allowed,refunded,charged,closed_by_reconciler
	// acct_123,2026-03-01T10:00:00Z,2026-03-01T11:00:00Z,22,26,0,0,4,2,false,true,22,0,0,0
	// acct_123,2026-03-01T11:00:00Z,2026-03-01T12:00:00Z,23,24,0,4,1,2,true,false,23,0,0,0
	// acct_123,total,,45,50,0,4,5,4,true,false,45,0,0,0
}
