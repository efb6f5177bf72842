package sink_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// A customer's statement is the sum of the export's rows of the keys and
// months billed to it: acct_b moves from cus_A to cus_B on December 1, so
// its October and November stay on cus_A's statement and its December is
// on cus_B's; a refund larger than a month's usage makes net negative and
// carries credit into the next month's billed.
func TestStatementSumsTheCustomersExportRows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	jan := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	now := jan.Add(time.Hour)
	for i, m := range []time.Time{oct, nov, dec} {
		at := m.Add(36 * time.Hour)
		e.writeNet(t, "acct_a", "p1", at, int64(100+i), 0, 5)
		e.writeNet(t, "acct_b", "p1", at, int64(40+i), int64(10*i), 0)
		e.writeNet(t, "acct_c", "p1", at, 1000, 0, 0) // another customer's key
	}
	e.writeNet(t, "acct_b", "p2", nov.Add(40*time.Hour), 0, 60, 0) // November: net negative
	for _, m := range []struct {
		key, customer string
		from          time.Time
	}{{"acct_a", "cus_A", time.Time{}}, {"acct_b", "cus_A", time.Time{}}, {"acct_c", "cus_C", time.Time{}}, {"acct_b", "cus_B", dec}} {
		if err := sink.SetStripeCustomerFrom(ctx, e.pool, m.key, m.customer, m.from); err != nil {
			t.Fatal(err)
		}
	}
	var rows []export.Row
	if err := e.ex.Export(ctx, export.Query{From: oct, To: jan, Granularity: export.Month, Now: now}, func(rs []export.Row) error {
		rows = append(rows, rs...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		customer string
		billedTo func(key string, start time.Time) bool
		lines    int
	}{
		{"cus_A", func(k string, s time.Time) bool { return k == "acct_a" || (k == "acct_b" && s.Before(dec)) }, 5},
		{"cus_B", func(k string, s time.Time) bool { return k == "acct_b" && !s.Before(dec) }, 1},
		{"cus_Nobody", func(string, time.Time) bool { return false }, 0},
	} {
		st, err := sink.CustomerStatement(ctx, e.pool, e.ex, tt.customer, oct, jan, now)
		if err != nil {
			t.Fatal(err)
		}
		var want sink.StatementTotal
		for _, r := range rows {
			if tt.billedTo(r.Key, r.PeriodStart) {
				want.Allowed += r.Allowed
				want.Charged += r.Charged
				want.Refunded += r.Refunded
				want.Net += r.Net
				want.Billed += r.Billed
			}
		}
		if st.Total != want || len(st.Lines) != tt.lines {
			t.Errorf("%s: total %+v over %d lines, want %+v over %d", tt.customer, st.Total, len(st.Lines), want, tt.lines)
		}
		var sum sink.StatementTotal
		for _, l := range st.Lines {
			sum.Allowed, sum.Charged, sum.Refunded, sum.Net, sum.Billed = sum.Allowed+l.Allowed, sum.Charged+l.Charged,
				sum.Refunded+l.Refunded, sum.Net+l.Net, sum.Billed+l.Billed
		}
		if sum != st.Total {
			t.Errorf("%s: lines sum to %+v, total says %+v", tt.customer, sum, st.Total)
		}
	}
	// The figures that make the cases differ: November's net is negative
	// and leaves credit, so billed and net differ.
	st, _ := sink.CustomerStatement(ctx, e.pool, e.ex, "cus_A", nov, dec, now)
	for _, l := range st.Lines {
		if l.Key == "acct_b" && (l.Net >= 0 || l.Billed != 0) {
			t.Errorf("acct_b's November: net %d, billed %d; want net negative, billed 0", l.Net, l.Billed)
		}
	}
	for _, bad := range []string{"", "acct_a", "cus_A;"} {
		if _, err := sink.CustomerStatement(ctx, e.pool, e.ex, bad, oct, jan, now); err == nil {
			t.Errorf("customer %q: accepted", bad)
		}
	}
	if _, err := sink.CustomerStatement(ctx, e.pool, e.ex, "cus_A", nov.Add(time.Hour), jan, now); err == nil {
		t.Error("from mid-month: accepted")
	}
}
