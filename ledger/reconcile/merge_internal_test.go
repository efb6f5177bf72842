package reconcile

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger"
)

// mergeSorted, which Write uses, is Merge followed by a sort by primary
// key: on batches with many reports per row (equal seqs, reordered
// reports, window starts apart by less than a microsecond), the same rows
// in the same order.
func TestMergeSortedIsMergeThenSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for round := range 200 {
		n := rng.IntN(300)
		reps := make([]ledger.Report, n)
		for i := range reps {
			start := base.Add(time.Duration(rng.IntN(3))*time.Minute + time.Duration(rng.IntN(1500))*time.Nanosecond)
			if rng.IntN(2) == 0 {
				start = start.In(time.FixedZone("x", 3600))
			}
			reps[i] = ledger.Report{
				Key: []string{"a", "b", "ab", "é", "B"}[rng.IntN(5)], ProcessID: []string{"p1", "p2"}[rng.IntN(2)],
				WindowStart: start, WindowEnd: start.Add(time.Minute), Region: []string{"eu", "us"}[rng.IntN(2)],
				Spent: rng.Int64N(5), Leased: rng.Int64N(5), Rejected: rng.Int64N(5), Degraded: rng.Int64N(5),
				WouldReject: rng.Int64N(5), Refunded: rng.Int64N(5), Charged: rng.Int64N(5), Final: rng.IntN(4) == 0,
				Seq: rng.Int64N(4), SentAt: base.Add(time.Duration(rng.IntN(10)) * time.Second),
			}
		}
		want := Merge(reps)
		slices.SortStableFunc(want, func(a, b ledger.Report) int {
			return cmp.Or(strings.Compare(a.Key, b.Key), a.WindowStart.Compare(b.WindowStart), strings.Compare(a.Region, b.Region),
				strings.Compare(a.ProcessID, b.ProcessID))
		})
		got := mergeSorted(reps)
		if !slices.EqualFunc(got, want, func(a, b ledger.Report) bool {
			return a.Key == b.Key && a.ProcessID == b.ProcessID && a.Region == b.Region && a.WindowStart.Equal(b.WindowStart) &&
				a.WindowEnd.Equal(b.WindowEnd) && a.SentAt.Equal(b.SentAt) && a.Spent == b.Spent && a.Leased == b.Leased &&
				a.Rejected == b.Rejected && a.Degraded == b.Degraded && a.WouldReject == b.WouldReject &&
				a.Refunded == b.Refunded && a.Charged == b.Charged && a.Final == b.Final && a.Seq == b.Seq
		}) {
			t.Fatalf("round %d: mergeSorted\n%+v\nwant\n%+v", round, got, want)
		}
	}
}

// Reports of one (key, window, process) from two regions are two rows in
// Merge and in mergeSorted, whatever their seqs, final flags and counts:
// ap naming eu's process cannot fold its report into eu's (issue 28).
func TestMergeKeepsRegionsApart(t *testing.T) {
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	eu := ledger.Report{Key: "k", WindowStart: base, WindowEnd: base.Add(time.Minute), ProcessID: "eu-1", Region: "eu",
		Spent: 40, Leased: 40, Seq: 3, SentAt: base}
	ap := eu
	ap.Region, ap.Seq, ap.Final, ap.Spent, ap.Refunded = "ap", 1<<62, true, 0, 1_000_000
	for name, merge := range map[string]func([]ledger.Report) []ledger.Report{"Merge": Merge, "mergeSorted": mergeSorted} {
		for _, order := range [][]ledger.Report{{eu, ap}, {ap, eu}} {
			got := merge(order)
			if len(got) != 2 {
				t.Fatalf("%s(%s first): %d rows, want one per region: %+v", name, order[0].Region, len(got), got)
			}
			for _, r := range got {
				want := eu
				if r.Region == "ap" {
					want = ap
				}
				if r != want {
					t.Fatalf("%s(%s first): row %+v, want %+v", name, order[0].Region, r, want)
				}
			}
		}
	}
	if got := mergeSorted([]ledger.Report{eu, ap}); got[0].Region != "ap" {
		t.Fatalf("mergeSorted: %s's row first, want ap's (the primary key's order: region before process)", got[0].Region)
	}
}

// split cuts sorted rows into contiguous parts of about equal size, never
// fewer than minRows rows in one (but one part always), covering every row
// once in order.
func TestSplit(t *testing.T) {
	for _, tc := range []struct{ rows, n, minRows, want int }{
		{0, 2, 1000, 1}, {1, 2, 1000, 1}, {1999, 2, 1000, 1}, {2000, 2, 1000, 2}, {5000, 2, 1000, 2},
		{5000, 8, 1000, 5}, {7, 3, 1, 3}, {7, 1, 1, 1}, {2, 4, 1, 2},
	} {
		rows := make([]ledger.Report, tc.rows)
		for i := range rows {
			rows[i].Seq = int64(i)
		}
		parts := split(rows, tc.n, tc.minRows)
		if len(parts) != tc.want {
			t.Errorf("%d rows, %d parts of ≥ %d: %d parts, want %d", tc.rows, tc.n, tc.minRows, len(parts), tc.want)
		}
		next := int64(0)
		for _, p := range parts {
			if len(parts) > 1 && len(p) < tc.minRows {
				t.Errorf("%d rows, %d parts of ≥ %d: a part of %d", tc.rows, tc.n, tc.minRows, len(p))
			}
			for _, r := range p {
				if r.Seq != next {
					t.Fatalf("%d rows, %d parts of ≥ %d: row %d where %d was due", tc.rows, tc.n, tc.minRows, r.Seq, next)
				}
				next++
			}
		}
		if next != int64(tc.rows) {
			t.Errorf("%d rows, %d parts: %d rows in the parts", tc.rows, tc.n, next)
		}
	}
}
