package sink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// A meter fixes its granularity on its first run: an hourly continuous
// sync sent a key's 10 units, and a --month sync of the same meter is
// refused with an error naming the granularity, sending nothing; Stripe
// bills 10, not 20 (issue 36, item 3). A CloudEvents sink is held to its
// first calendar the same way.
func TestSinkKeepsItsFirstSettings(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.write(t, "acct_a", "p1", time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC), 10, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	fake := startFakeStripe(t)
	hourly := sink.StripeConfig{Meter: testMeter, Granularity: export.Hour, Metrics: e.m}
	pass := time.Date(2026, 11, 20, 10, 30, 0, 0, time.UTC)
	if st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), hourly, nov, pass.Truncate(time.Hour).Add(time.Hour), pass); err != nil || st.Sent != 1 {
		t.Fatalf("hourly pass: %+v, %v", st, err)
	}
	monthly := sink.StripeConfig{Meter: testMeter, Metrics: e.m}
	st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), monthly, nov, dec, now)
	if !errors.Is(err, sink.ErrSinkChanged) || !strings.Contains(err.Error(), "granularity: first run sent hour, this run asks month") ||
		st.Sent != 0 {
		t.Fatalf("monthly run on the hourly meter: %+v, %v; want ErrSinkChanged naming the granularity", st, err)
	}
	if billed, _ := fake.billedBy("cus_A"); billed != 10 {
		t.Fatalf("Stripe billed cus_A %d for 10 units", billed)
	}
	// Another meter is another sink: it takes its own granularity.
	other := sink.StripeConfig{Meter: testMeter + "_monthly", Metrics: e.m}
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), other, nov, dec, now); errors.Is(err, sink.ErrSinkChanged) {
		t.Fatalf("another meter: %v", err)
	}

	_, s, name := httpSink(t)
	for _, tt := range []struct {
		cfg     sink.Config
		refused string // "" accepted
	}{
		{sink.Config{Sink: name, Calendar: export.CalendarUTC}, ""},
		{sink.Config{Sink: name, Calendar: export.CalendarPlan}, "calendar: first run cut by utc, this run asks plan"},
		{sink.Config{Sink: name, Granularity: export.Day}, "granularity: first run sent month, this run asks day"},
		{sink.Config{Sink: name, Customers: sink.CustomersDated}, "customer rule: first run used key, this run asks dated"},
		{sink.Config{Sink: name}, ""},
	} {
		p, err := sink.NewPublisher(e.pool, e.ex, s, tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Run(ctx, nov, dec, now)
		if tt.refused == "" && err != nil || tt.refused != "" && (!errors.Is(err, sink.ErrSinkChanged) || !strings.Contains(err.Error(), tt.refused)) {
			t.Errorf("run with %+v: %v; want refused: %q", tt.cfg, err, tt.refused)
		}
	}
}

// hourPass runs an hourly continuous Stripe pass at at, as stripe-sync
// --continuous --granularity hour does: the current month up to the
// current hour.
func hourPass(t *testing.T, e *env, fake *fakeStripe, at time.Time) (sink.StripeStats, error) {
	t.Helper()
	cfg := sink.StripeConfig{Meter: testMeter, Granularity: export.Hour, Metrics: e.m}
	from := time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	return sink.SyncStripe(context.Background(), e.pool, e.ex, fake.events(), cfg, from, at.Truncate(time.Hour).Add(time.Hour), at)
}

// After 25 h of Stripe 500s an event is held; at the next month's start,
// its period far behind the run's range, the held and unsent gauges still
// count it and the oldest unsent period's age grows; settled as missing,
// the next run sends it however old it is, and Stripe bills the ledger's
// 10 (issue 36, item 5).
func TestHeldEventStaysCounted(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	hour := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", hour, 10, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	fake := startFakeStripe(t)
	name := sink.StripeSinkName(testMeter)
	fake.down.Store(true)
	first := hour.Add(90 * time.Minute)
	if _, err := hourPass(t, e, fake, first); !errors.Is(err, sink.ErrSinkRefused) {
		t.Fatalf("pass with Stripe answering 500: %v", err)
	}
	st, err := hourPass(t, e, fake, first.Add(25*time.Hour))
	if err != nil || len(st.Held) != 1 || st.HeldTotal != 1 {
		t.Fatalf("pass 25 h later: %+v, %v; want the event held", st, err)
	}
	fake.down.Store(false)
	next := time.Date(2026, 12, 2, 0, 30, 0, 0, time.UTC)
	st, err = hourPass(t, e, fake, next)
	if err != nil {
		t.Fatal(err)
	}
	age := next.Sub(hour.Add(time.Hour)).Seconds()
	for what, got := range map[string][2]float64{
		"held":          {testutil.ToFloat64(e.m.Held(name)), 1},
		"unsent":        {testutil.ToFloat64(e.m.Unsent(name)), 1},
		"oldest unsent": {testutil.ToFloat64(e.m.OldestUnsent(name)), age},
	} {
		if got[0] != got[1] {
			t.Errorf("next month: %s gauge %v, want %v (stats %+v)", what, got[0], got[1], st)
		}
	}
	var eventID string
	if err := e.pool.QueryRow(ctx, `SELECT event_id FROM billing_sink_events WHERE sink = $1 AND status = 'held'`, name).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	fake.forget()
	if err := sink.SettleHeld(ctx, e.pool, name, eventID, false, next); err != nil {
		t.Fatal(err)
	}
	st, err = hourPass(t, e, fake, next.Add(time.Hour))
	if err != nil || st.Resent != 1 || st.Unsent != 0 || testutil.ToFloat64(e.m.OldestUnsent(name)) != 0 {
		t.Fatalf("pass after settling as missing: %+v, %v; want it resent and nothing unsent", st, err)
	}
	if billed, _ := fake.billedBy("cus_A"); billed != 10 {
		t.Fatalf("Stripe billed cus_A %d, want 10", billed)
	}
}

// With the hourly sync down from Nov 20 to Dec 2, the first pass back
// sends every hour that settled meanwhile, not only the lookback's 72:
// Stripe bills all 110 units, nothing unsent (issue 36, item 5).
func TestOutageLongerThanLookback(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	e.write(t, "acct_a", "p1", time.Date(2026, 11, 19, 10, 0, 0, 0, time.UTC), 10, true)
	fake := startFakeStripe(t)
	if st, err := hourPass(t, e, fake, time.Date(2026, 11, 20, 0, 30, 0, 0, time.UTC)); err != nil || st.Sent != 1 {
		t.Fatalf("last pass before the outage: %+v, %v", st, err)
	}
	for _, u := range []struct {
		day   int
		month time.Month
		spent int64
	}{{21, 11, 40}, {25, 11, 40}, {29, 11, 10}, {1, 12, 10}} {
		e.write(t, "acct_a", "p1", time.Date(2026, u.month, u.day, 10, 0, 0, 0, time.UTC), u.spent, true)
	}
	st, err := hourPass(t, e, fake, time.Date(2026, 12, 2, 0, 30, 0, 0, time.UTC))
	if err != nil || st.Sent != 4 || st.Unsent != 0 {
		t.Fatalf("first pass after the outage: %+v, %v; want the 4 hours sent", st, err)
	}
	if billed, _ := fake.billedBy("cus_A"); billed != 110 {
		t.Fatalf("Stripe billed cus_A %d of 110", billed)
	}
}
