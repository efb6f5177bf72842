package export_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger/export"
)

// randomHistory is keys × a random history each between first and last:
// windows at random minutes, spend, post-hoc charges, and refunds up to
// four times a window's spend, so that nets go negative, credit carries
// over many periods and some refunds exceed everything billed before
// (Uncredited). A few windows are not final.
func randomHistory(rng *rand.Rand, keys []string, first, last time.Time) []planWindow {
	var ws []planWindow
	span := int64(last.Sub(first) / time.Minute)
	for _, k := range keys {
		seen := map[time.Time]bool{}
		for range 5 + rng.IntN(60) {
			at := first.Add(time.Duration(rng.Int64N(span)) * time.Minute)
			if seen[at] {
				continue
			}
			seen[at] = true
			w := planWindow{key: k, at: at, spent: rng.Int64N(20), final: rng.IntN(20) > 0}
			switch rng.IntN(5) {
			case 0:
				w.refunded = rng.Int64N(4*w.spent + 30)
			case 1:
				w.charged = rng.Int64N(10)
			}
			ws = append(ws, w)
		}
	}
	return ws
}

// storeCarry stores key's carry for sink as of boundary b, as a sink pass
// stores it: the state before the key's first period at or after b, read
// by an export from b without a carry. It returns where the carry starts
// (zero: the key has no period from b on).
func storeCarry(t *testing.T, pool *pgxpool.Pool, ex *export.Exporter, sink, key string, g export.Granularity,
	cal export.Calendar, b, to, now time.Time) time.Time {
	t.Helper()
	rows := exportAll(t, ex, export.Query{From: b, To: to, Granularity: g, Calendar: cal, Now: now, Keys: []string{key}})
	if len(rows) == 0 {
		return time.Time{}
	}
	r := rows[0]
	if !r.Before.Exact {
		t.Fatalf("%s: saturated carry %+v", key, r.Before)
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO billing_sink_carries
    (sink, key, valid_from, carried_at, granularity, calendar, cum_net, low, cum_billed) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		sink, key, b, r.PeriodStart, string(g), string(cal), r.Before.CumNet, r.Before.Low, r.Before.CumBilled); err != nil {
		t.Fatal(err)
	}
	return r.PeriodStart
}

// TestExportFromStoredCarry: over random histories with refunds larger
// than the spend before them, on both calendars and every granularity, an
// export that starts each key from a stored carry (Query.Carry) gives the
// rows of a full read — every figure, Before included — even after the
// rows the carry sums are deleted (as retention removes them), with
// pages of one key and of many, keys with no carry, and carries whose
// boundary is before From and after it.
func TestExportFromStoredCarry(t *testing.T) {
	_, pool := ledgertest.Database(t)
	seedPlans(t, pool)
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	first := time.Date(2026, 8, 25, 0, 0, 0, 0, time.UTC)
	for m := first; m.Before(now); m = m.AddDate(0, 1, 0) {
		if _, err := pool.Exec(ctx, `SELECT usage_ensure_partition($1)`, m); err != nil {
			t.Fatal(err)
		}
	}
	plans := []string{"ny15", "kol", "gone", ""} // "": the plan "default"
	cases := []struct {
		g        export.Granularity
		cal      export.Calendar
		from, to time.Time
	}{
		{export.Hour, export.CalendarUTC, time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{export.Day, export.CalendarUTC, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{export.Month, export.CalendarUTC, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{export.Hour, export.CalendarPlan, time.Date(2026, 11, 20, 3, 17, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{export.Day, export.CalendarPlan, time.Date(2026, 10, 30, 12, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{export.Month, export.CalendarPlan, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
	}
	for ci, c := range cases {
		t.Run(fmt.Sprintf("%s %s", c.cal, c.g), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 36))
			sink := fmt.Sprintf("carry-%d", ci)
			if _, err := pool.Exec(ctx, `INSERT INTO billing_sinks (sink, granularity, calendar) VALUES ($1, $2, $3)`,
				sink, string(c.g), string(c.cal)); err != nil {
				t.Fatal(err)
			}
			var keys []string
			for i := range 40 {
				k := fmt.Sprintf("c%d_k%02d", ci, i)
				keys = append(keys, k)
				if p := plans[i%len(plans)]; p != "" {
					if _, err := pool.Exec(ctx, `INSERT INTO quota_key_plans (key, plan, revision) VALUES ($1, $2, 100)`, k, p); err != nil {
						t.Fatal(err)
					}
				}
			}
			writeWindows(t, pool, randomHistory(rng, keys, first, now))
			ex, err := export.New(pool, export.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			q := export.Query{From: c.from, To: c.to, Granularity: c.g, Calendar: c.cal, Now: now, Keys: keys}
			want := exportAll(t, ex, q)
			if len(want) < 40 {
				t.Fatalf("%d rows: too few to judge", len(want))
			}
			uncredited := 0
			for _, r := range want {
				if r.Uncredited > 0 {
					uncredited++
				}
			}
			if uncredited == 0 {
				t.Fatal("no row with Uncredited: the histories do not test refunds beyond spend")
			}
			// A carry for three keys in four, at a random boundary before
			// From (an hour span's limit from To at most, as a pass's reach
			// is); then the rows it sums are deleted.
			span := c.to.Sub(c.from) + time.Duration(rng.Int64N(int64(20*24*time.Hour)))
			if c.g == export.Hour {
				span = export.MaxHours * time.Hour
			}
			carried := 0
			starts := map[string]time.Time{}
			for i, k := range keys {
				if i%4 == 3 {
					continue
				}
				b := c.from.Add(-time.Duration(rng.Int64N(int64(span - c.to.Sub(c.from) + 1))))
				if c.cal == export.CalendarUTC {
					b = c.g.Start(b)
				}
				at := storeCarry(t, pool, ex, sink, k, c.g, c.cal, b, c.to, now)
				if at.IsZero() {
					continue
				}
				carried++
				starts[k] = at
			}
			if carried < 20 {
				t.Fatalf("%d keys carried: too few to judge", carried)
			}
			q.Carry = sink
			check := func(what string) {
				t.Helper()
				for _, pageRows := range []int{1, 50, 10_000} {
					cfg := export.DefaultConfig()
					cfg.PageRows = pageRows
					ex, err := export.New(pool, cfg)
					if err != nil {
						t.Fatal(err)
					}
					for _, keyed := range []bool{true, false} {
						q := q
						if !keyed {
							q.Keys, q.Prefix = nil, fmt.Sprintf("c%d_", ci)
						}
						if got := exportAll(t, ex, q); !slices.Equal(got, want) {
							t.Fatalf("%s, pages of %d, keys %v: from the stored carries\n%swant (a full read)\n%s",
								what, pageRows, keyed, rowLines(got), rowLines(want))
						}
					}
				}
			}
			// The rows a carry sums are still there: each key's are read
			// from its own carry's start, whatever its page's others.
			check("rows kept")
			for k, at := range starts {
				if _, err := pool.Exec(ctx, `DELETE FROM usage_reports WHERE key = $1 AND window_start < $2`, k, at); err != nil {
					t.Fatal(err)
				}
			}
			check("rows deleted")
			// Without the carries the deleted rows are missed: the test
			// could fail.
			q.Carry = ""
			if got := exportAll(t, ex, q); slices.Equal(got, want) {
				t.Fatal("a full read after the deletion gives the same rows: the carries were not needed")
			}
		})
	}
}
