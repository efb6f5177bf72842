package sink_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger/sink"
)

// Retention removes the rows a sink acknowledged of periods ended more
// than sink.DefaultKeep ago, adding them up per key and month for an
// audit, and keeps every row not acknowledged (a failed and a held one,
// however old) and every younger one. A run after it over the whole
// range, the removed months included, sends nothing twice: the receiver
// sees only the failed event again (its recorded id, dropped as a
// duplicate), bills the ledger's figures, and no key differs but the
// held one.
func TestRetentionKeepsWhatAResendNeeds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	jun := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	want := map[string]int64{}
	for m := range 6 { // June to November
		at := jun.AddDate(0, m, 9)
		e.write(t, "acct_a", "p1", at, int64(10+m), true)
		e.write(t, "acct_b", "p1", at, int64(100+m), true)
		want["acct_a"] += int64(10 + m)
		want["acct_b"] += int64(100 + m)
	}
	rc, s, name := httpSink(t)
	p, err := sink.NewPublisher(e.pool, e.ex, s, sink.Config{Sink: name, Metrics: e.m, ResendWindow: sink.StripeResendWindow})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Run(ctx, jun, dec, now); err != nil || st.Sent != 12 {
		t.Fatalf("first run: %+v, %v", st, err)
	}
	// acct_a's June was held (unacknowledged past the dedupe window),
	// acct_b's July refused and still to be re-sent.
	for _, q := range []string{
		`UPDATE billing_sink_events SET status = 'held', acked_billed = 0, first_attempt_at = $2::timestamptz - interval '2 days'
WHERE sink = $1 AND key = 'acct_a' AND period_start = '2026-06-01Z'`,
		`UPDATE billing_sink_events SET status = 'failed', acked_billed = 0, first_attempt_at = $2
WHERE sink = $1 AND key = 'acct_b' AND period_start = '2026-07-01Z'`,
	} {
		if _, err := e.pool.Exec(ctx, q, name, now); err != nil {
			t.Fatal(err)
		}
	}
	deliveries, distinct := rc.counts()

	cutoff := now.Add(-sink.DefaultKeep) // August 31: June and July ended before it
	got, err := sink.Retain(ctx, e.pool, cutoff)
	if err != nil || len(got) != 1 || got[0].Sink != name || got[0].Rows != 2 || !got[0].Before.Equal(cutoff) {
		t.Fatalf("retention: %+v, %v; want 2 rows of %s removed before %v", got, err, name, cutoff)
	}
	type row struct {
		key    string
		period string
		status string
	}
	var left []row
	rows, err := e.pool.Query(ctx, `SELECT key, to_char(period_start AT TIME ZONE 'UTC', 'YYYY-MM'), status FROM billing_sink_events
WHERE sink = $1 AND period_start < '2026-08-01Z' ORDER BY 1, 2`, name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.key, &r.period, &r.status); err != nil {
			t.Fatal(err)
		}
		left = append(left, r)
	}
	if len(left) != 2 || left[0] != (row{"acct_a", "2026-06", "held"}) || left[1] != (row{"acct_b", "2026-07", "failed"}) {
		t.Fatalf("rows of June and July after retention: %+v; want acct_a's held June and acct_b's failed July only", left)
	}
	var younger int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM billing_sink_events WHERE sink = $1 AND period_start >= '2026-08-01Z'`,
		name).Scan(&younger); err != nil || younger != 8 {
		t.Fatalf("%d rows from August on, want all 8 (%v)", younger, err)
	}
	for _, a := range []struct {
		key, month string
		billed     int64
	}{{"acct_b", "2026-06", 100}, {"acct_a", "2026-07", 11}} {
		var periods, billed int64
		if err := e.pool.QueryRow(ctx, `SELECT periods, billed FROM billing_sink_retained
WHERE sink = $1 AND key = $2 AND month = ($3 || '-01Z')::timestamptz`, name, a.key, a.month).Scan(&periods, &billed); err != nil ||
			periods != 1 || billed != a.billed {
			t.Errorf("audit of %s %s: %d periods billed %d (%v); want 1 billed %d", a.key, a.month, periods, billed, err, a.billed)
		}
	}
	if again, err := sink.Retain(ctx, e.pool, cutoff); err != nil || again[0].Rows != 0 {
		t.Fatalf("second retention: %+v, %v; want nothing more", again, err)
	}

	st, err := p.Run(ctx, jun, dec, now.Add(time.Hour))
	if err != nil || st.Sent+st.Corrections != 0 || st.Resent != 1 || st.Retained != 2 || len(st.Held) != 1 {
		t.Fatalf("run after retention: %+v, %v; want the failed event re-sent, 2 periods retained, 1 held", st, err)
	}
	d2, n2 := rc.counts()
	if d2 != deliveries+1 || n2 != distinct {
		t.Fatalf("receiver: %d deliveries (%d distinct) after retention, was %d (%d); want the one re-sent event, a duplicate",
			d2, n2, deliveries, distinct)
	}
	if st.KeysDiffering != 1 {
		t.Errorf("%d keys differ after retention, want 1 (acct_a's held June)", st.KeysDiffering)
	}
	if b := rc.billed(); b["acct_a"] != want["acct_a"] || b["acct_b"] != want["acct_b"] {
		t.Errorf("receiver bills %v, the ledger %v", b, want)
	}
}
