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
			s, err := sink.NewStripe(nopEvents{}, testMeter, []sink.StripeCustomer{withKey(c.customer, "k")}, c.grace)
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
			raw, err := s.Frame(ev, nil, c.now)
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

// Hour slices go to Stripe as they settle, each stamped at its last
// second while its invoice is open: a pass sends the hours complete by
// its now, the next pass the hours completed since (issue 27, scenario
// 4: at a period's end the invoice already holds all but the last hour).
func TestHourSlicesSentAsTheySettle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fake := startFakeStripe(t)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_h", "cus_H"); err != nil {
		t.Fatal(err)
	}
	h9 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_h", "p1", h9.Add(10*time.Minute), 6, true)
	e.write(t, "acct_h", "p2", h9.Add(70*time.Minute), 4, true)
	cfg := sink.StripeConfig{Meter: testMeter, Granularity: export.Hour, Metrics: e.m}
	pass := func(now time.Time) sink.StripeStats {
		t.Helper()
		st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, dec, export.Hour.Next(export.Hour.Start(now)), now)
		if err != nil {
			t.Fatalf("pass at %v: %v", now, err)
		}
		return st
	}
	if st := pass(h9.Add(90 * time.Minute)); st.Sent != 1 || st.Open != 1 {
		t.Fatalf("pass at 10:30: %+v, want the 09:00 hour sent and 10:00 open", st)
	}
	if st := pass(h9.Add(2 * time.Hour)); st.Sent != 1 || st.Unchanged != 1 {
		t.Fatalf("pass at 11:00: %+v, want the 10:00 hour sent", st)
	}
	b, _ := fake.billedBy("cus_H")
	fake.mu.Lock()
	defer fake.mu.Unlock()
	stamps := map[int64]int64{}
	for _, ev := range fake.stored {
		stamps[ev.timestamp] = ev.value
	}
	if b != 10 || stamps[h9.Add(time.Hour-time.Second).Unix()] != 6 || stamps[h9.Add(2*time.Hour-time.Second).Unix()] != 4 {
		t.Fatalf("Stripe billed %d with stamps %v, want 6 at 09:59:59 and 4 at 10:59:59", b, stamps)
	}
}

// November was billed; a late report to it arrives 36 days after it
// ended, long after its invoice was finalized (and past Stripe's 35-day
// window for November's timestamps). The correction is sent stamped at
// the time it is sent, so it lands on the customer's open invoice
// instead of on none (issue 27, scenario 4).
func TestLateCorrectionReachesTheOpenInvoice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fake := startFakeStripe(t)
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 10, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	cfg := sink.StripeConfig{Meter: testMeter}
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, now); err != nil {
		t.Fatal(err)
	}
	e.write(t, "acct_a", "p1~late2", at, 2, true)
	late := dec.Add(36 * 24 * time.Hour)
	st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, late)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	var onOpenInvoice int64
	for _, ev := range fake.stored {
		if ev.timestamp == late.Unix() {
			onOpenInvoice += ev.value
		}
	}
	if err != nil || st.Corrections != 1 || onOpenInvoice != 2 {
		t.Fatalf("late correction: %d stamped at the run, want 2 (%+v, %v)", onOpenInvoice, st, err)
	}
}

func withKey(c sink.StripeCustomer, key string) sink.StripeCustomer {
	c.Key = key
	return c
}
