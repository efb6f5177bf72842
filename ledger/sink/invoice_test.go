package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/stripe/stripe-go/v84"

	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// A meter event keeps its slice's timestamp while the customer's invoice
// period holding it is open (its end + the finalization grace after now),
// and is stamped with the time it is sent once that invoice is finalized,
// so a late correction lands on the current invoice instead of none
// (issue 27, scenario 4). The invoice period follows the customer's
// anchor day in its zone when set, else the UTC month.
func TestStripeTimestampFollowsInvoiceFinalization(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	utc := sink.StripeCustomer{Key: "k", CustomerID: "cus_U"}
	anchored := sink.StripeCustomer{Key: "k", CustomerID: "cus_N", AnchorDay: 31, TimeZone: ny}
	slice := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC) // an hour slice, Nov 30 17:00 in New York
	sliceTS := slice.Add(time.Hour - time.Second)
	for _, c := range []struct {
		name     string
		customer sink.StripeCustomer
		grace    time.Duration
		rev      int
		now      time.Time
		want     time.Time
	}{
		{"open UTC month", utc, 0, 0, time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC), sliceTS},
		{"UTC month ended, within the grace", utc, 0, 1, time.Date(2026, 12, 1, 0, 30, 0, 0, time.UTC), sliceTS},
		{"UTC invoice finalized", utc, 0, 1, time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)},
		{"a 72h grace", utc, 72 * time.Hour, 1, time.Date(2026, 12, 3, 23, 0, 0, 0, time.UTC), sliceTS},
		// Anchored on the 31st in New York: November's period runs to
		// Nov 30 00:00 local, so the slice is in the period ending Dec 31.
		{"anchored period open", anchored, 0, 1, time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC), sliceTS},
		{"anchored invoice finalized", anchored, 0, 1, time.Date(2026, 12, 31, 6, 0, 0, 0, time.UTC),
			time.Date(2026, 12, 31, 6, 0, 0, 0, time.UTC)},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := sink.NewStripe(nopEvents{}, testMeter, map[string]sink.StripeCustomer{"k": c.customer}, c.grace)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := json.Marshal(sink.Data{Key: "k", PeriodStart: slice, PeriodEnd: slice.Add(time.Hour), Granularity: export.Hour,
				Billed: 7, Revision: c.rev, BilledDelta: 2})
			ev := cloudevents.NewEvent()
			ev.SetID(sink.EventID("k", slice, export.Hour, c.rev))
			if err := ev.SetData(cloudevents.ApplicationJSON, d); err != nil {
				t.Fatal(err)
			}
			raw, err := s.Frame(ev, c.now)
			if err != nil {
				t.Fatal(err)
			}
			var f struct {
				Customer   string
				Value      int64
				Timestamp  int64
				Identifier string
			}
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatal(err)
			}
			value := map[int]int64{0: 7, 1: 2}[c.rev]
			if f.Timestamp != c.want.Unix() || f.Value != value || f.Customer != c.customer.CustomerID ||
				f.Identifier != sink.StripeIdentifier(testMeter, ev.ID(), f.Customer, value, f.Timestamp) {
				t.Fatalf("frame %s, want timestamp %v value %d", raw, c.want, value)
			}
		})
	}
	if end := anchored.InvoicePeriodEnd(time.Date(2027, 2, 10, 0, 0, 0, 0, time.UTC)); !end.Equal(time.Date(2027, 2, 28, 5, 0, 0, 0, time.UTC)) {
		t.Fatalf("anchored invoice period of Feb 10 ends %v, want Feb 28 00:00 New York", end)
	}
}

// nopEvents is a MeterEvents for tests that only frame events.
type nopEvents struct{}

func (nopEvents) Create(context.Context, *stripe.BillingMeterEventCreateParams) (*stripe.BillingMeterEvent, error) {
	return nil, errors.New("nopEvents: no request expected")
}
