package export_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// The carry-over rule on one period.
func TestCarry(t *testing.T) {
	for _, tt := range []struct{ in, net, billed, out int64 }{
		{0, 0, 0, 0},
		{0, 7, 7, 0},
		{0, -3, 0, 3},
		{3, 5, 2, 0},
		{9, 3, 0, 6},
		{2, 2, 0, 0},
		{4, -1, 0, 5},
	} {
		billed, out := export.Carry(tt.in, tt.net)
		if billed != tt.billed || out != tt.out || billed < 0 || out < 0 || billed-out != tt.net-tt.in {
			t.Errorf("Carry(%d, %d) = %d, %d; want %d, %d", tt.in, tt.net, billed, out, tt.billed, tt.out)
		}
	}
}

func month(m time.Month) time.Time { return time.Date(2026, m, 1, 0, 0, 0, 0, time.UTC) }

// use is one report of a key: cost spent, refunded and charged in a window
// of the month.
type use struct {
	month                    time.Month
	spent, refunded, charged int64
	proc                     string // "" is p1
	rejected                 int64
	day                      int // 0 is the 10th
}

// billedRow is what TestExportBillsNet checks of a row.
type billedRow struct {
	month                                               time.Month
	spent, refunded, charged, net, in, billed, out, unc int64
}

func billedRows(rows []export.Row) []billedRow {
	var out []billedRow
	for _, r := range rows {
		out = append(out, billedRow{r.PeriodStart.Month(), r.Allowed, r.Refunded, r.Charged, r.Net, r.CarriedIn, r.Billed, r.CarriedOut,
			r.Uncredited})
	}
	return out
}

// netCases are the ledgers of TestExportBillsNet, a key each, and the rows
// of [August, January) by month.
var netCases = []struct {
	name, key string
	uses      []use
	want      []billedRow
}{
	{"spend and refund in one period", "k_same", []use{{month: 10, spent: 10, refunded: 3}},
		[]billedRow{{10, 10, 3, 0, 7, 0, 7, 0, 0}}},
	{"a refund in the next period larger than its spend: carried", "k_carry",
		[]use{{month: 10, spent: 10}, {month: 11, spent: 2, refunded: 5}, {month: 12, spent: 5}},
		[]billedRow{{10, 10, 0, 0, 10, 0, 10, 0, 0}, {11, 2, 5, 0, -3, 0, 0, 3, 0}, {12, 5, 0, 0, 5, 3, 2, 0, 0}}},
	{"a carry spanning several periods", "k_span",
		[]use{{month: 8, spent: 12}, {month: 9, spent: 1, refunded: 10}, {month: 10, spent: 3}, {month: 11, spent: 4}, {month: 12, spent: 5}},
		[]billedRow{{8, 12, 0, 0, 12, 0, 12, 0, 0}, {9, 1, 10, 0, -9, 0, 0, 9, 0}, {10, 3, 0, 0, 3, 9, 0, 6, 0}, {11, 4, 0, 0, 4, 6, 0, 2, 0},
			{12, 5, 0, 0, 5, 2, 3, 0, 0}}},
	{"charges", "k_charges",
		[]use{{month: 10, spent: 5, charged: 7}, {month: 11, charged: 2, refunded: 1}, {month: 12, spent: 1, refunded: 4, charged: 1}},
		[]billedRow{{10, 5, 0, 7, 12, 0, 12, 0, 0}, {11, 0, 1, 2, 1, 0, 1, 0, 0}, {12, 1, 4, 1, -2, 0, 0, 2, 0}}},
	{"a credit used up by charges", "k_charge_carry",
		[]use{{month: 9, spent: 5}, {month: 10, spent: 6, refunded: 8}, {month: 11, charged: 5}},
		[]billedRow{{9, 5, 0, 0, 5, 0, 5, 0, 0}, {10, 6, 8, 0, -2, 0, 0, 2, 0}, {11, 0, 0, 5, 5, 2, 3, 0, 0}}},
	{"several processes and windows add up before the carry", "k_procs",
		[]use{{month: 9, spent: 2}, {month: 10, spent: 3}, {month: 10, spent: 4, proc: "p2"}, {month: 10, refunded: 9, day: 20},
			{month: 11, spent: 8, refunded: 1, proc: "p2"}},
		[]billedRow{{9, 2, 0, 0, 2, 0, 2, 0, 0}, {10, 7, 9, 0, -2, 0, 0, 2, 0}, {11, 8, 1, 0, 7, 2, 5, 0, 0}}},
	// Credit never exceeds what the key was billed before: a refund
	// beyond it (a forged report, or one from before the reconciler cut
	// refunds to their row's spend) is uncredited, not carried for ever.
	{"a refund in a key's first period larger than its spend: uncredited", "k_first",
		[]use{{month: 10, spent: 6, refunded: 8}, {month: 11, charged: 5}},
		[]billedRow{{10, 6, 8, 0, -2, 0, 0, 0, 2}, {11, 0, 0, 5, 5, 0, 5, 0, 0}}},
	{"a forged refund of the largest counter: credit only what was billed", "k_forged",
		[]use{{month: 10, spent: 40}, {month: 11, refunded: reconcile.MaxCounter, proc: "us-1"}, {month: 12, spent: 5}, {month: 12, spent: 50, day: 20}},
		[]billedRow{{10, 40, 0, 0, 40, 0, 40, 0, 0}, {11, 0, reconcile.MaxCounter, 0, -reconcile.MaxCounter, 0, 0, 40, reconcile.MaxCounter - 40},
			{12, 55, 0, 0, 55, 40, 15, 0, 0}}},
}

func writeUses(t testing.TB, w *reconcile.Writer, key string, uses []use) {
	t.Helper()
	var reps []ledger.Report
	for _, u := range uses {
		day, proc := u.day, u.proc
		if day == 0 {
			day = 10
		}
		if proc == "" {
			proc = "p1"
		}
		start := time.Date(2026, u.month, day, 12, 0, 7, 0, time.UTC)
		reps = append(reps, ledger.Report{Key: key, WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: proc,
			Region: "eu", Spent: u.spent, Refunded: u.refunded, Charged: u.charged, Rejected: u.rejected, Final: true, Seq: 1,
			SentAt: start})
	}
	if _, err := w.Write(context.Background(), reps); err != nil {
		t.Fatal(err)
	}
}

// Every export bills net (spent + charged − refunded) per period, with a
// negative net carried forward and deducted from the key's next periods,
// up to what the key was billed before (the rest is Uncredited): no row
// bills below zero, and over a key's periods the billed figures sum to
// the net plus the uncredited refund once the credit is used up. A range that starts after a
// negative period still carries it in, and a rerun, by any range, gives
// the same figures.
func TestExportBillsNet(t *testing.T) {
	_, pool := ledgertest.Database(t)
	w := reconcile.NewWriter(pool)
	for _, c := range netCases {
		writeUses(t, w, c.key, c.uses)
	}
	ex, err := export.New(pool, export.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	after := time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC)
	read := func(from, to time.Time, g export.Granularity, prefix string) []export.Row {
		t.Helper()
		var out []export.Row
		err := ex.Export(context.Background(), export.Query{From: from, To: to, Granularity: g, Prefix: prefix, Now: after},
			func(rows []export.Row) error { out = append(out, rows...); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := read(month(8), month(12).AddDate(0, 1, 0), export.Month, "")
	for _, c := range netCases {
		t.Run(c.name, func(t *testing.T) {
			rows := read(month(8), month(12).AddDate(0, 1, 0), export.Month, c.key)
			if got := billedRows(rows); !slices.Equal(got, c.want) {
				t.Fatalf("rows (month spent refunded charged net in billed out uncredited)\n%+v\nwant\n%+v", got, c.want)
			}
			var net, billed int64
			for i, r := range rows {
				if r.Key != c.key || !r.Complete {
					t.Fatalf("row %d: %+v", i, r)
				}
				if r.Billed < 0 || r.CarriedIn < 0 || r.CarriedOut < 0 || r.Uncredited < 0 || r.Net != r.Allowed+r.Charged-r.Refunded ||
					r.Billed-r.CarriedOut != r.Net+r.Uncredited-r.CarriedIn {
					t.Fatalf("row %d breaks the rule: %+v", i, r)
				}
				if i > 0 && r.CarriedIn != rows[i-1].CarriedOut {
					t.Fatalf("row %d carries in %d, the row before carried out %d", i, r.CarriedIn, rows[i-1].CarriedOut)
				}
				net += r.Net + r.Uncredited
				billed += r.Billed
			}
			if last := rows[len(rows)-1].CarriedOut; billed != net+last {
				t.Fatalf("Σ billed %d, Σ net %d, credit left %d", billed, net, last)
			}
			if rows[len(rows)-1].CarriedOut == 0 && billed != net {
				t.Fatalf("Σ billed %d != Σ net %d with no credit left", billed, net)
			}

			// A range starting later carries in what the earlier months left.
			for i := range rows {
				later := read(rows[i].PeriodStart, month(12).AddDate(0, 1, 0), export.Month, c.key)
				if !slices.Equal(later, rows[i:]) {
					t.Fatalf("from %s: %+v, want %+v", rows[i].PeriodStart.Format("2006-01"), later, rows[i:])
				}
			}
		})
	}
	if again := read(month(8), month(12).AddDate(0, 1, 0), export.Month, ""); !slices.Equal(again, all) {
		t.Fatalf("a rerun differs:\n%+v\n%+v", again, all)
	}

	// Days carry on their own: k_procs' October refund (the 20th) is a
	// negative day carried to its next day of usage, November's.
	days := read(month(10), month(12), export.Day, "k_procs")
	want := []billedRow{{10, 7, 0, 0, 7, 0, 7, 0, 0}, {10, 0, 9, 0, -9, 0, 0, 9, 0}, {11, 8, 1, 0, 7, 9, 0, 2, 0}}
	if got := billedRows(days); !slices.Equal(got, want) {
		t.Fatalf("days %+v, want %+v", got, want)
	}
}

// The encoders show the billing figures: CSV columns after complete, the
// cursor last; NDJSON fields of the same names.
func TestEncodeBillingColumns(t *testing.T) {
	r := export.Row{Key: "k", PeriodStart: month(12), PeriodEnd: month(12).AddDate(0, 1, 0), Allowed: 5, Rejected: 1, Windows: 2,
		Complete: true, Refunded: 1, Charged: 2, Net: 6, CarriedIn: 3, Billed: 3, CarriedOut: 0}
	var b bytes.Buffer
	enc := export.NewEncoder(&b, export.CSV, export.Month)
	if err := enc.Rows([]export.Row{r}); err != nil {
		t.Fatal(err)
	}
	_ = enc.End()
	cr := csv.NewReader(strings.NewReader(b.String()))
	cr.Comment = '#'
	recs, err := cr.ReadAll()
	if err != nil || len(recs) != 2 {
		t.Fatalf("%q %v", recs, err)
	}
	cols := map[string]string{}
	for i, name := range recs[0] {
		cols[name] = recs[1][i]
	}
	for name, want := range map[string]int64{"allowed": 5, "rejected": 1, "refunded": 1, "charged": 2, "net": 6, "carried_in": 3,
		"billed": 3, "carried_out": 0, "windows": 2} {
		if cols[name] != strconv.FormatInt(want, 10) {
			t.Errorf("csv %s = %q, want %d (%s)", name, cols[name], want, b.String())
		}
	}
	if recs[0][len(recs[0])-1] != "cursor" || cols["cursor"] != r.Cursor().String() || cols["complete"] != "true" {
		t.Errorf("csv: %q", recs)
	}

	b.Reset()
	enc = export.NewEncoder(&b, export.NDJSON, export.Month)
	if err := enc.Rows([]export.Row{r}); err != nil {
		t.Fatal(err)
	}
	var got export.Row
	if err := json.Unmarshal([]byte(strings.SplitN(b.String(), "\n", 2)[0]), &got); err != nil || got != r {
		t.Fatalf("ndjson %s: %+v, %v; want %+v", b.String(), got, err, r)
	}
}
