package sink_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// sinkTablesWritten is what a preview must leave as it found it: every
// billing_sink_* table (events, the registry and its checkpoint, revisits,
// retained, the audit trail, carries).
var sinkTablesWritten = []string{"billing_sink_audit", "billing_sink_carries", "billing_sink_events", "billing_sink_retained",
	"billing_sink_revisits", "billing_sinks"}

// sinkTables is, per billing_sink_* table of the database (and
// billing_sinks), its row count and a hash of its rows.
func sinkTables(t *testing.T, e *env) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := e.pool.Query(ctx, `SELECT tablename::text FROM pg_tables
WHERE schemaname = 'public' AND (tablename LIKE 'billing\_sink\_%' OR tablename = 'billing_sinks') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range sinkTablesWritten {
		if !slices.Contains(tables, want) {
			t.Fatalf("no table %s among %v", want, tables)
		}
	}
	out := make(map[string]string, len(tables))
	for _, table := range tables {
		var n int64
		var sum string
		if err := e.pool.QueryRow(ctx, `SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM `+
			pgx.Identifier{table}.Sanitize()+` t`).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		out[table] = fmt.Sprintf("%d rows, md5 %s", n, sum)
	}
	return out
}

// sinkTablesDigest is sinkTables in one string.
func sinkTablesDigest(t *testing.T, e *env) string {
	t.Helper()
	tables := sinkTables(t, e)
	var b strings.Builder
	for _, table := range slices.Sorted(maps.Keys(tables)) {
		fmt.Fprintf(&b, "%s: %s\n", table, tables[table])
	}
	return b.String()
}

// A preview of a continuous pass changes no sink table, though the pass
// it previews writes them: after an hourly incremental sink's first pass,
// a late report before acct_b's stored carry (the pass drops the carry),
// a late report in acct_a's range (a correction) and a new key (first
// events). The preview plans the events the pass then sends, and every
// billing_sink_* table (events, registry and checkpoint, revisits,
// retained, audit, carries) keeps its row count and the hash of its rows;
// the pass then changes the events, the checkpoint, the carries and the
// audit trail.
func TestPreviewOfAPassWritesNoSinkTable(t *testing.T) {
	oct := func(d, h int) time.Time { return time.Date(2026, 10, d, h, 0, 0, 0, time.UTC) }
	nov := func(d, h int) time.Time { return time.Date(2026, 11, d, h, 0, 0, 0, time.UTC) }
	e, _, p := carryEnv(t, export.CalendarUTC, func(e *env) {
		e.writeHours(t, "acct_a", nov(28, 0), nov(30, 23), 10)
		e.writeHours(t, "acct_b", oct(1, 0), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 3)
	})
	ctx := context.Background()
	e.writeNet(t, "acct_b", "p2", oct(5, 0), 0, 0, 300)
	e.writeNet(t, "acct_b", "p2", nov(30, 23), 1, 0, 0)
	e.writeNet(t, "acct_a", "p2", nov(30, 22), 1, 0, 0)
	e.writeNet(t, "acct_c", "p1", nov(30, 21), 7, 0, 0)
	now := time.Date(2026, 12, 1, 0, 30, 0, 0, time.UTC)
	from, to := export.Month.Start(now), export.Hour.Next(export.Hour.Start(now))

	before := sinkTables(t, e)
	planned, pst, err := p.Preview(ctx, from, to, now)
	if err != nil {
		t.Fatal(err)
	}
	if after := sinkTables(t, e); !maps.Equal(after, before) {
		for _, table := range slices.Sorted(maps.Keys(before)) {
			if after[table] != before[table] {
				t.Errorf("a preview changed %s: %s, was %s", table, after[table], before[table])
			}
		}
	}
	st, err := p.Run(ctx, from, to, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(planned) == 0 || len(planned) != st.Sent+st.Corrections+st.Resent || pst.KeysRead != st.KeysRead {
		t.Fatalf("preview planned %d events reading %d keys; the pass sent %+v", len(planned), pst.KeysRead, st)
	}
	after := sinkTables(t, e)
	for _, table := range []string{"billing_sink_events", "billing_sinks", "billing_sink_carries", "billing_sink_audit"} {
		if after[table] == before[table] {
			t.Errorf("the pass left %s as it was (%s): the preview had nothing there to leave", table, after[table])
		}
	}
}

// A preview lists what the next run sends, per customer: the event
// Stripe refused (resent as recorded), a correction and a new key's first
// event, with the values and timestamps the run then sends to the fake
// Stripe. It writes nothing, sends nothing, and runs while another run
// holds the sink's lock.
func TestPreviewIsTheNextRun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	for _, k := range [][2]string{{"acct_a", "cus_A"}, {"acct_b", "cus_B"}, {"acct_c", "cus_A"}} {
		if err := sink.SetStripeCustomer(ctx, e.pool, k[0], k[1]); err != nil {
			t.Fatal(err)
		}
	}
	e.write(t, "acct_a", "p1", at, 100, true)
	e.write(t, "acct_b", "p1", at, 50, true)
	clk := clock.NewManual(time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC))
	fake := startFakeStripeAt(t, clk, time.Hour)
	cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk}
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); err != nil {
		t.Fatal(err)
	}
	e.write(t, "acct_b", "p2", at, 7, true) // a late report: a correction
	e.write(t, "acct_c", "p1", at, 30, true)
	fake.tooMany.Store(true)
	clk.Advance(10 * time.Minute)
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); !errors.Is(err, sink.ErrSinkRefused) {
		t.Fatalf("run against a 429: %v, want refused", err)
	}
	fake.tooMany.Store(false)
	clk.Advance(10 * time.Minute)

	// Another run holds the sink's lock: a preview only reads.
	lock, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() { // before the pool closes, which waits for every connection
		if !released {
			lock.Release()
		}
	})
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, "quota-sink:"+sink.StripeSinkName(testMeter)); err != nil {
		t.Fatal(err)
	}
	before := sinkTablesDigest(t, e)
	_, requestsBefore := fake.billedBy("cus_A")
	planned, st, err := sink.PreviewStripe(ctx, e.pool, e.ex, cfg, nov, dec, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if after := sinkTablesDigest(t, e); after != before {
		t.Errorf("the sink tables changed under a preview:\n%s\n%s", before, after)
	}
	if _, requests := fake.billedBy("cus_A"); requests != requestsBefore {
		t.Errorf("a preview sent %d requests to Stripe", requests-requestsBefore)
	}
	kinds := map[string]int{}
	for _, p := range planned {
		kinds[p.Kind]++
	}
	if kinds["resend"] != 1 || kinds["correction"]+kinds["first"] != 1 || len(planned) != 2 || st.Resent != 1 {
		t.Fatalf("planned %+v (stats %+v); want the refused event resent and one other", planned, st)
	}
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	lock.Release()
	released = true

	fake.mu.Lock()
	sentBefore := len(fake.history)
	fake.mu.Unlock()
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	sent := append([]fakeMeterEvent(nil), fake.history[sentBefore:]...)
	fake.mu.Unlock()
	if len(sent) != len(planned) {
		t.Fatalf("the run sent %+v, the preview planned %+v", sent, planned)
	}
	for i, p := range planned {
		got := fakeMeterEvent{customer: p.Customer, value: p.Value, timestamp: p.Timestamp.Unix(),
			arrived: sent[i].arrived} // when the fake took it: not the preview's to know
		if got != sent[i] {
			t.Errorf("event %d: planned %+v, sent %+v", i, got, sent[i])
		}
	}
	perCustomer := map[string]int64{}
	for _, p := range planned {
		perCustomer[p.Customer] += p.Value
	}
	if perCustomer["cus_A"] != 30 || perCustomer["cus_B"] != 7 {
		t.Errorf("planned per customer %v, want cus_A 30 (acct_c), cus_B 7 (acct_b's correction)", perCustomer)
	}
}

// A preview of an event whose invoice was finalized after Stripe refused
// it (429 at 00:20, the November invoice finalized at 01:00) plans it
// re-stamped at the preview's send time (01:20), as the run then sends
// it, and counts it re-stamped; the recorded frame is left as it was.
func TestPreviewPlansTheRestampedEvent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.write(t, "acct_a", "p1", time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC), 100, true)
	if err := sink.SetStripeCustomer(ctx, e.pool, "acct_a", "cus_A"); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Date(2026, 12, 1, 0, 20, 0, 0, time.UTC))
	fake := startFakeStripeAt(t, clk, time.Hour)
	cfg := sink.StripeConfig{Meter: testMeter, Metrics: e.m, Clock: clk}
	fake.tooMany.Store(true)
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); !errors.Is(err, sink.ErrSinkRefused) {
		t.Fatalf("run at 00:20: %v, want refused", err)
	}
	fake.tooMany.Store(false)
	clk.Set(time.Date(2026, 12, 1, 1, 20, 0, 0, time.UTC))

	before := sinkTablesDigest(t, e)
	planned, st, err := sink.PreviewStripe(ctx, e.pool, e.ex, cfg, nov, dec, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if after := sinkTablesDigest(t, e); after != before {
		t.Errorf("the sink tables changed under a preview:\n%s\n%s", before, after)
	}
	if len(planned) != 1 || st.Restamped != 1 || st.Resent != 1 {
		t.Fatalf("planned %+v (stats %+v); want the refused event, re-stamped", planned, st)
	}
	if want := clk.Now(); !planned[0].Timestamp.Equal(want) {
		t.Errorf("planned timestamp %v, want the send time %v: the invoice of the recorded one is finalized", planned[0].Timestamp, want)
	}
	if _, err := sink.SyncStripe(ctx, e.pool, e.ex, fake.events(), cfg, nov, dec, clk.Now()); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.history) != 1 || fake.history[0].timestamp != planned[0].Timestamp.Unix() ||
		fake.history[0].value != planned[0].Value || fake.history[0].customer != planned[0].Customer {
		t.Errorf("the run sent %+v, the preview planned %+v", fake.history, planned[0])
	}
}
