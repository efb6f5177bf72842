package sink_test

import (
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger/sink"
	"github.com/quotaplatform/quota/period"
)

// An invoice period ends where the period package's month ends: one
// definition of local midnight. In Santiago the clock jumps from 24:00 to
// 01:00 on the night the period anchored on the 6th starts (Sunday
// 2026-09-06), so that month starts at 01:00 local, 04:00Z; 00:00 local
// read naively is 23:00 the day before, 03:00Z, which billed the last hour
// of September 5 on the wrong invoice.
func TestInvoicePeriodEndIsThePeriodPackagesMonth(t *testing.T) {
	santiago, err := time.LoadLocation("America/Santiago")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	for _, c := range []struct {
		name string
		cus  sink.StripeCustomer
		at   time.Time
		want time.Time
	}{
		{"Santiago anchor 6 across the skipped midnight", sink.StripeCustomer{AnchorDay: 6, TimeZone: santiago},
			time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC), time.Date(2026, 9, 6, 4, 0, 0, 0, time.UTC)},
		{"Santiago anchor 6, the last instant before the period ends", sink.StripeCustomer{AnchorDay: 6, TimeZone: santiago},
			time.Date(2026, 9, 6, 3, 30, 0, 0, time.UTC), time.Date(2026, 9, 6, 4, 0, 0, 0, time.UTC)},
		{"Paris anchor 31 in February", sink.StripeCustomer{AnchorDay: 31, TimeZone: paris},
			time.Date(2027, 2, 10, 0, 0, 0, 0, time.UTC), time.Date(2027, 2, 27, 23, 0, 0, 0, time.UTC)},
		{"UTC calendar month", sink.StripeCustomer{},
			time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.cus.InvoicePeriodEnd(c.at)
			if !got.Equal(c.want) {
				t.Fatalf("InvoicePeriodEnd(%v) = %v, want %v", c.at, got.UTC(), c.want)
			}
			cal := period.Calendar{Location: c.cus.TimeZone, AnchorDay: c.cus.AnchorDay}
			if _, end := cal.Bounds(period.Month, c.at); !end.Equal(got) {
				t.Fatalf("period.Calendar month ends %v, InvoicePeriodEnd %v", end.UTC(), got.UTC())
			}
		})
	}
}
