package sink_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/ledger/sink"
)

// A key moved to a new customer on Dec 5: a late report to November, billed
// to the old customer, sends its correction to the old customer too, and
// December goes to the new one (issue 36, item 6: November went 100 to
// the old customer and 10 to the new). A key mapped only from Dec 5 has
// no customer for November: it is skipped and counted apart, not in
// keys_differing, and its December is billed.
func TestCorrectionFollowsTheBilledCustomer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", at, 100, true)
	e.write(t, "acct_b", "p1", at, 40, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_OLD"); err != nil {
		t.Fatal(err)
	}
	fake := startFakeStripe(t)
	cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m}
	if st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, now); err != nil || st.Sent != 1 {
		t.Fatalf("November's run: %+v, %v", st, err)
	}
	moved := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for _, kc := range [][2]string{{"acct_a", "cus_NEW"}, {"acct_b", "cus_B"}} {
		if err := sink.SetStripeCustomerFrom(ctx, e.pool, kc[0], kc[1], moved); err != nil {
			t.Fatal(err)
		}
	}
	e.write(t, "acct_a", "p1~late", at, 10, true)
	e.write(t, "acct_a", "p1", time.Date(2026, 12, 10, 9, 0, 0, 0, time.UTC), 30, true)
	e.write(t, "acct_b", "p1", time.Date(2026, 12, 10, 9, 0, 0, 0, time.UTC), 5, true)
	jan := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, dec, jan, jan.Add(24*time.Hour))
	if err != nil || st.Corrections != 1 || st.Sent != 2 {
		t.Fatalf("December's run: %+v, %v; want November's correction and two Decembers", st, err)
	}
	for customer, want := range map[string]int64{"cus_OLD": 110, "cus_NEW": 30, "cus_B": 5} {
		if got, _ := fake.billedBy(customer); got != want {
			t.Errorf("Stripe billed %s %d, want %d", customer, got, want)
		}
	}
	name := sink.StripeSinkName(testMeter)
	if st.KeysDiffering != 0 || st.SkippedKeys != 1 || testutil.ToFloat64(e.m.Unmapped(name)) != 1 ||
		testutil.ToFloat64(e.m.KeysDiffering(name)) != 0 {
		t.Fatalf("December's run: %d keys differing, %d skipped keys (gauge %v); want 0 and acct_b's November apart",
			st.KeysDiffering, st.SkippedKeys, testutil.ToFloat64(e.m.Unmapped(name)))
	}
	cs, err := sink.StripeCustomers(ctx, e.pool)
	if err != nil || len(cs) != 2 || cs[0].CustomerID != "cus_NEW" || cs[1].CustomerID != "cus_B" {
		t.Fatalf("current mappings %+v, %v; want the latest of each key", cs, err)
	}
}
