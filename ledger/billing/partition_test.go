package billing_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// relations returns the names of the usage_reports partitions a JSON plan
// scans, once each.
func relations(t *testing.T, plan []byte) []string {
	t.Helper()
	var doc []map[string]any
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var out []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if r, ok := n["Relation Name"].(string); ok && strings.HasPrefix(r, "usage_reports") && !slices.Contains(out, r) {
			out = append(out, r)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					walk(m)
				}
			}
		}
	}
	root, ok := doc[0]["Plan"].(map[string]any)
	if !ok {
		t.Fatalf("plan %s has no Plan", plan)
	}
	walk(root)
	return out
}

// A month's bill for one key reads one partition: the ledger's queries and
// the month bill of ledger/README.md, with usage in the months before and
// after.
func TestMonthBillScansOnePartition(t *testing.T) {
	url, pool := seed(t)
	ctx := context.Background()
	var reps []ledger.Report
	for _, s := range []time.Time{time.Date(2026, 2, 28, 23, 59, 0, 0, time.UTC), time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)} {
		reps = append(reps, ledger.Report{Key: "acme", WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: "p1",
			Region: "eu", Spent: 1, Seq: 1, SentAt: s})
	}
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE usage_reports`); err != nil {
		t.Fatal(err)
	}
	from, to := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	maxRows := billing.DefaultConfig().MaxRows + 1
	tests := []struct {
		name string
		sql  string
		args []any
	}{
		{"ledger, day", billing.BucketSQL, []any{"acme", from, to, "day", maxRows}},
		{"ledger, hour", billing.BucketSQL, []any{"acme", from, to, "hour", maxRows}},
		{"ledger, window", billing.WindowSQL, []any{"acme", from, to, maxRows}},
		{"README month bill", `SELECT key, sum(net) AS net, bool_and(complete) AS complete, bool_or(is_degraded) AS degraded
			FROM usage_windows
			WHERE key = 'acme' AND window_start >= '2026-03-01Z' AND window_start < '2026-04-01Z'
			GROUP BY key`, nil},
	}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			var plan []byte
			if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+tt.sql, tt.args...).Scan(&plan); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if got := relations(t, plan); !slices.Equal(got, []string{"usage_reports_p202603"}) {
				t.Errorf("%s, plan_cache_mode %s: scans %v, want only usage_reports_p202603; plan:\n%s", tt.name, mode, got, plan)
			}
		}
		conn.Release()
	}
	// A filter on usage_by_day's day is not one on window_start: it reads
	// every partition of the key (why ledger/README.md bills a month from
	// usage_windows).
	var plan []byte
	if err := pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT sum(net) FROM usage_by_day
		WHERE key = 'acme' AND day >= '2026-03-01Z' AND day < '2026-04-01Z'`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if got := relations(t, plan); len(got) < 3 {
		t.Errorf("usage_by_day month query scans %v, expected every partition", got)
	}
	// The answer covers March only.
	l, _ := newLedger(t, url, billing.DefaultConfig())
	res, err := l.Usage(ctx, billing.Query{Key: "acme", From: from, To: to, Granularity: billing.Day})
	if err != nil || res.Totals.Net != 145 {
		t.Fatalf("March net %d, want 145 (%v)", res.Totals.Net, err)
	}
}
