package reconcile_test

import (
	"context"
	"testing"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

func TestWriterMergeRules(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	type row struct {
		spent, leased, seq int64
		final              bool
	}
	tests := []struct {
		name    string
		reports []ledger.Report
		want    row
	}{
		{"in order", []ledger.Report{rep("k", "p", 1, 5, 8, false), rep("k", "p", 2, 9, 9, false), rep("k", "p", 3, 10, 10, true)}, row{10, 10, 3, true}},
		{"duplicates", []ledger.Report{rep("k", "p", 1, 5, 8, false), rep("k", "p", 1, 5, 8, false), rep("k", "p", 2, 7, 7, false), rep("k", "p", 2, 7, 7, false)}, row{7, 7, 2, false}},
		{"reordered: older after newer", []ledger.Report{rep("k", "p", 3, 10, 4, true), rep("k", "p", 1, 5, 8, false), rep("k", "p", 2, 9, 9, false)}, row{10, 4, 3, true}},
		{"leased goes down with seq", []ledger.Report{rep("k", "p", 1, 1, 10, false), rep("k", "p", 2, 3, 3, false)}, row{3, 3, 2, false}},
		{"final sticks", []ledger.Report{rep("k", "p", 2, 4, 4, true), rep("k", "p", 2, 4, 4, false)}, row{4, 4, 2, true}},
	}
	for i, tt := range tests {
		for _, mode := range []string{"one by one", "one batch"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				ctx := context.Background()
				w := reconcile.NewWriter(pool)
				key := tt.name + mode
				reps := make([]ledger.Report, len(tt.reports))
				for j, r := range tt.reports {
					r.Key = key
					reps[j] = r
				}
				if mode == "one batch" {
					if _, err := w.Write(ctx, reps); err != nil {
						t.Fatal(err)
					}
				} else {
					for _, r := range reps {
						if _, err := w.Write(ctx, []ledger.Report{r}); err != nil {
							t.Fatal(err)
						}
					}
				}
				var got row
				if err := pool.QueryRow(ctx, `SELECT spent, leased, seq, final FROM usage_reports WHERE key = $1`, key).
					Scan(&got.spent, &got.leased, &got.seq, &got.final); err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Fatalf("case %d: row %+v, want %+v", i, got, tt.want)
				}
				// Writing everything again changes nothing.
				res, err := w.Write(ctx, reps)
				if err != nil {
					t.Fatal(err)
				}
				if res.Inserted != 0 || res.Updated != 0 || res.Unchanged != 1 {
					t.Fatalf("rewrite: %+v, want one unchanged row", res)
				}
			})
		}
	}
}
