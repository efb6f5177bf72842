package sink_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// writeHours writes one final report of spent for key in every hour of
// [from, to), in one statement.
func (e *env) writeHours(t *testing.T, key string, from, to time.Time, spent int64) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, final, seq, sent_at)
SELECT $1, h, 'p1', h + interval '1 minute', 'eu', $4, true, 1, h
FROM generate_series($2::timestamptz, $3::timestamptz - interval '1 hour', interval '1 hour') h`, key, from, to, spent); err != nil {
		t.Fatal(err)
	}
}

// carryEnv is a ledger from 2026-10-01 with partitions to 2027-01 and an
// hourly incremental sink on cal whose first pass ran at 2026-11-30 23:30
// (a full read, storing each key's carry at its reach, 2026-10-31, and at
// now less the lookback, 2026-11-27 23:00 or 23:30). seed writes the rows
// first. On the plan calendar every key's plan is Asia/Kolkata's, whose
// clock hours start at half past the UTC hour.
func carryEnv(t *testing.T, cal export.Calendar, seed func(e *env)) (*env, string, *sink.Publisher) {
	t.Helper()
	e, _ := incrementalEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `INSERT INTO quota_plans (name, time_zone, anchor_day, revision) VALUES ('default', 'Asia/Kolkata', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	for m := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC); m.Year() < 2027; m = m.AddDate(0, 1, 0) {
		if _, err := e.pool.Exec(ctx, `SELECT usage_ensure_partition($1)`, m); err != nil {
			t.Fatal(err)
		}
	}
	seed(e)
	_, s, name := httpSink(t)
	p, err := sink.NewPublisher(e.pool, e.ex, s, sink.Config{Sink: name, Metrics: e.m, Granularity: export.Hour,
		Calendar: cal, Incremental: true})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC)
	if st, err := p.Run(ctx, export.Month.Start(at), export.Hour.Next(export.Hour.Start(at)), at); err != nil || st.KeysDiffering != 0 {
		t.Fatalf("first pass: %+v, %v", st, err)
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM billing_sink_carries WHERE sink = $1 AND valid_from >= $2 AND calendar = $3`,
		name, time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC), string(cal)).Scan(&n); err != nil || n == 0 {
		t.Fatalf("first pass stored %d carries, %v", n, err)
	}
	return e, name, p
}

// secondPass runs the first pass of December (00:30, reaching back to
// 2026-11-28 00:00) and returns its reach and end.
func secondPass(t *testing.T, p *sink.Publisher) (from, to, now time.Time) {
	t.Helper()
	now = time.Date(2026, 12, 1, 0, 30, 0, 0, time.UTC)
	to = export.Hour.Next(export.Hour.Start(now))
	if _, err := p.Run(context.Background(), export.Month.Start(now), to, now); err != nil {
		t.Fatalf("second pass: %v", err)
	}
	return time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), to, now
}

// billedByHour is the ledger's billed figure of key's hours on cal in
// [from, to), read in full from its first report (no carry).
func billedByHour(t *testing.T, e *env, cal export.Calendar, key string, from, to, now time.Time) map[time.Time]int64 {
	t.Helper()
	out := map[time.Time]int64{}
	q := export.Query{From: from, To: to, Granularity: export.Hour, Calendar: cal, Now: now, Keys: []string{key}}
	if err := e.ex.Export(context.Background(), q, func(rows []export.Row) error {
		for _, r := range rows {
			if r.Complete {
				out[r.PeriodStart] = r.Billed
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// ackedByHour is what the sink acknowledged for key's hours in [from, to).
func ackedByHour(t *testing.T, e *env, sinkName, key string, from, to time.Time) map[time.Time]int64 {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT period_start, acked_billed FROM billing_sink_events
WHERE sink = $1 AND key = $2 AND period_start >= $3 AND period_start < $4 AND status = 'sent'`, sinkName, key, from, to)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[time.Time]int64{}
	for rows.Next() {
		var at time.Time
		var v int64
		if err := rows.Scan(&at, &v); err != nil {
			t.Fatal(err)
		}
		out[at.UTC()] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameHours(t *testing.T, what string, got, want map[time.Time]int64) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: no hour to compare", what)
	}
	for h, w := range want {
		if got[h] != w {
			t.Fatalf("%s: hour %s acknowledged %d, ledger bills %d (want %d hours equal)", what, h.Format(time.RFC3339), got[h], w, len(want))
		}
	}
}

// A late report in a window before a key's stored carry (a charge on
// 2026-10-05, long after it was carried) makes the carry stale: the next
// pass of the key reads it whole and bills what a full read bills. The
// late charge raises what acct_a was billed before its October refund,
// so the credit carried into its late-November spend grows from 500 to
// 800 and outlasts the month: the stale carry would bill its last 21
// hours, a full read does not. acct_b's carry stays valid and is used.
func TestIncrementalPassDropsStaleCarry(t *testing.T) {
	for _, cal := range []export.Calendar{export.CalendarUTC, export.CalendarPlan} {
		t.Run(string(cal), func(t *testing.T) { dropsStaleCarry(t, cal) })
	}
}

func dropsStaleCarry(t *testing.T, cal export.Calendar) {
	oct := func(d, h int) time.Time { return time.Date(2026, 10, d, h, 0, 0, 0, time.UTC) }
	nov := func(d, h int) time.Time { return time.Date(2026, 11, d, h, 0, 0, 0, time.UTC) }
	e, name, p := carryEnv(t, cal, func(e *env) {
		e.writeNet(t, "acct_a", "p1", oct(1, 0), 500, 0, 0)
		e.writeNet(t, "acct_a", "p1", oct(20, 0), 0, 2000, 0) // 1500 beyond what was billed: uncredited
		e.writeHours(t, "acct_a", nov(28, 0), nov(30, 23), 10)
		e.writeHours(t, "acct_b", oct(1, 0), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 3)
		e.writeNet(t, "acct_b", "p1", nov(27, 12), 0, 150, 0)
	})
	ctx := context.Background()
	// The late charge, and a report in the range so that the pass reads
	// the key.
	e.writeNet(t, "acct_a", "p2", oct(5, 0), 0, 0, 300)
	e.writeNet(t, "acct_a", "p2", nov(30, 23), 1, 0, 0)
	from, to, now := secondPass(t, p)
	for _, key := range []string{"acct_a", "acct_b"} {
		sameHours(t, key, ackedByHour(t, e, name, key, from, to), billedByHour(t, e, cal, key, from, to, now))
	}
	diffs, err := sink.KeyDifferences(ctx, e.pool, name, export.Hour, cal, from, to, now)
	if err != nil || len(diffs) != 0 {
		t.Fatalf("after the pass, a full read differs from the sink: %+v, %v", diffs, err)
	}
	// Both keys were read again from a carry at the pass's reach.
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(DISTINCT key) FROM billing_sink_carries WHERE sink = $1 AND valid_from = $2`,
		name, from).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d keys carried at the reach, %v; want 2", n, err)
	}
}

// Retention removes rows a carry sums; the carry keeps them: a later
// pass bills a changed key exactly as the ledger did before the removal,
// credit included, where a full read of what is left would not.
func TestStoredCarryOutlivesRetention(t *testing.T) {
	for _, cal := range []export.Calendar{export.CalendarUTC, export.CalendarPlan} {
		t.Run(string(cal), func(t *testing.T) { carryOutlivesRetention(t, cal) })
	}
}

func carryOutlivesRetention(t *testing.T, cal export.Calendar) {
	oct := func(d, h int) time.Time { return time.Date(2026, 10, d, h, 0, 0, 0, time.UTC) }
	nov := func(d, h int) time.Time { return time.Date(2026, 11, d, h, 0, 0, 0, time.UTC) }
	e, name, p := carryEnv(t, cal, func(e *env) {
		e.writeHours(t, "acct_r", oct(1, 0), nov(30, 23), 10)
		e.writeNet(t, "acct_r", "p1", nov(26, 0), 0, 1000, 0) // credit into 2026-11-28
	})
	ctx := context.Background()
	e.writeNet(t, "acct_r", "p2", nov(30, 22), 5, 0, 0)
	from, to := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	now := time.Date(2026, 12, 1, 0, 30, 0, 0, time.UTC)
	want := billedByHour(t, e, cal, "acct_r", from, to, now)
	// Retention: every row before the carry's start (2026-11-27 23:00).
	if _, err := e.pool.Exec(ctx, `DELETE FROM usage_reports WHERE window_start < $1`, nov(27, 23)); err != nil {
		t.Fatal(err)
	}
	first := nov(28, 0)
	if cal == export.CalendarPlan {
		first = first.Add(30 * time.Minute) // Kolkata's clock hour
	}
	if left := billedByHour(t, e, cal, "acct_r", from, to, now); left[first] == want[first] {
		t.Fatalf("a full read after the removal bills %s the same (%d): the removal changes nothing", first, want[first])
	}
	secondPass(t, p)
	sameHours(t, "acct_r", ackedByHour(t, e, name, "acct_r", from, to), want)
}
