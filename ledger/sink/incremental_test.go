package sink_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
	"github.com/quotaplatform/quota/migrations"
)

// queryLog is a pgx tracer that keeps the SQL of every query a pool ran.
type queryLog struct {
	mu  sync.Mutex
	sql []string // guarded by mu
}

func (l *queryLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sql = append(l.sql, d.SQL)
	l.mu.Unlock()
	return ctx
}

func (l *queryLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// reset returns the queries logged so far and forgets them.
func (l *queryLog) reset() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.sql
	l.sql = nil
	return out
}

// incrementalEnv is env on a private Postgres server: a checkpoint is the
// oldest transaction running on the whole server, which other packages'
// tests on the shared one would hold back. Its pool logs its queries.
func incrementalEnv(t *testing.T) (*env, *queryLog) {
	t.Helper()
	url := testserver.StartPostgres(t).NewDatabase(t)
	ctx := context.Background()
	if _, err := migrations.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	log := &queryLog{}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := newEnv(t)
	e.pool = pool
	if e.ex, err = export.New(pool, export.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	return e, log
}

func (e *env) incrementalPublisher(t *testing.T, name string, s sink.Sender) *sink.Publisher {
	t.Helper()
	p, err := sink.NewPublisher(e.pool, e.ex, s, sink.Config{Sink: name, Metrics: e.m, Granularity: export.Hour,
		Incremental: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ledgerReads counts the queries that read usage_reports.
func ledgerReads(sql []string) int {
	n := 0
	for _, q := range sql {
		if strings.Contains(q, "usage_reports") {
			n++
		}
	}
	return n
}

// After a full pass, an idle pass reads no key: one query finds that
// nothing changed, and it runs a handful of queries in all, where a full
// pass reads every key's history (twice before: export, then the
// differences). A changed key is then read alone: a late report to a
// period sent gets its correction, a new hour its first event, and the
// other keys are not read.
func TestIncrementalPassReadsChangedKeys(t *testing.T) {
	e, log := incrementalEnv(t)
	ctx := context.Background()
	start := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	for k := range 40 {
		for h := range 3 {
			e.write(t, fmt.Sprintf("acct_%02d", k), "p1", start.Add(time.Duration(h)*time.Hour), int64(k+1), true)
		}
	}
	rc, s, name := httpSink(t)
	p := e.incrementalPublisher(t, name, s)
	at := start.Add(3 * time.Hour)
	from, to := export.Month.Start(at), at
	st, err := p.Run(ctx, from, to, at)
	if err != nil || st.Sent != 120 || st.KeysDiffering != 0 {
		t.Fatalf("first pass: %+v, %v; want 120 sent", st, err)
	}
	full := log.reset()

	steps := []struct {
		name                    string
		change                  func()
		keysRead, sent, correct int
		maxQueries              int
	}{
		{name: "idle", change: func() {}, maxQueries: 12},
		{name: "late report and a new hour", change: func() {
			e.write(t, "acct_03", "p2", start, 5, true)                 // a late row of an hour sent
			e.write(t, "acct_07", "p1", start.Add(-time.Hour), 2, true) // an hour not sent yet
		}, keysRead: 2, sent: 1, correct: 1, maxQueries: 30},
		{name: "idle again", change: func() {}, maxQueries: 12},
	}
	for _, step := range steps {
		step.change()
		log.reset()
		st, err := p.Run(ctx, from, to, at)
		queries := log.reset()
		if len(queries) > step.maxQueries || (step.keysRead == 0 && ledgerReads(queries) != 1) {
			t.Fatalf("%s: %d queries (%d reading the ledger), want at most %d and one ledger read when idle (a full pass ran %d)",
				step.name, len(queries), ledgerReads(queries), step.maxQueries, len(full))
		}
		if err != nil || st.KeysRead != step.keysRead || st.Sent != step.sent || st.Corrections != step.correct ||
			st.KeysDiffering != 0 {
			t.Fatalf("%s: %+v, %v; want %d keys read, %d sent, %d corrections", step.name, st, err, step.keysRead, step.sent,
				step.correct)
		}
	}
	billed := rc.billed()
	if billed["acct_03"] != 3*4+5 || billed["acct_07"] != 3*8+2 || billed["acct_00"] != 3 {
		t.Fatalf("billed %v", billed)
	}
}

// A row committed by a transaction that began before a pass and commits
// after the pass read the ledger is sent by the next pass, though its
// transaction id is older than anything the pass saw committed.
func TestIncrementalPassSeesConcurrentCommit(t *testing.T) {
	e, _ := incrementalEnv(t)
	ctx := context.Background()
	start := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", start, 10, true)
	rc, s, name := httpSink(t)
	p := e.incrementalPublisher(t, name, s)
	at := start.Add(2 * time.Hour)
	from, to := export.Month.Start(at), at
	if st, err := p.Run(ctx, from, to, at); err != nil || st.Sent != 1 {
		t.Fatalf("first pass: %+v, %v", st, err)
	}
	// The slow writer takes its transaction id, then another writer
	// commits a row after it.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, final, seq, sent_at)
VALUES ('acct_slow', $1, 'p1', $1::timestamptz + interval '1 minute', 'eu', 7, true, 1, $1)`, start); err != nil {
		t.Fatal(err)
	}
	e.write(t, "acct_b", "p1", start, 3, true)
	st, err := p.Run(ctx, from, to, at)
	if err != nil || st.Sent != 1 || st.KeysRead != 1 {
		t.Fatalf("pass during the slow transaction: %+v, %v; want acct_b alone", st, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err = p.Run(ctx, from, to, at); err != nil || st.Sent != 1 {
		t.Fatalf("pass after the slow commit: %+v, %v; want acct_slow sent", st, err)
	}
	if b := rc.billed(); b["acct_slow"] != 7 || b["acct_b"] != 3 || b["acct_a"] != 10 {
		t.Fatalf("billed %v", b)
	}
}

// A key Config.Skip held back (a key without a customer) is read by
// every pass until it is sent, though its rows do not change; a period
// that ends between two passes is sent by the second, though no row
// changed.
func TestIncrementalPassRevisitsAndEndedPeriods(t *testing.T) {
	e, _ := incrementalEnv(t)
	ctx := context.Background()
	start := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", start, 10, true)
	e.write(t, "acct_b", "p1", start.Add(time.Hour), 4, true) // its hour is open at the first pass
	e.write(t, "acct_c", "p1", start, 6, true)                // no customer at first
	rc, s, name := httpSink(t)
	var mapped atomic.Bool
	p, err := sink.NewPublisher(e.pool, e.ex, s, sink.Config{Sink: name, Metrics: e.m, Granularity: export.Hour,
		Incremental: true, Skip: func(r export.Row, _ int64) bool { return r.Key == "acct_c" && !mapped.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name                 string
		at                   time.Time
		keysRead, sent, open int
		skipped, skippedKeys int
	}{
		{name: "first", at: start.Add(90 * time.Minute), keysRead: -1, sent: 1, open: 1, skipped: 1, skippedKeys: 1},
		{name: "acct_c still unmapped", at: start.Add(100 * time.Minute), keysRead: 1, skipped: 1, skippedKeys: 1},
		{name: "acct_c mapped", at: start.Add(110 * time.Minute), keysRead: 1, sent: 1},
		{name: "acct_b's hour ended", at: start.Add(150 * time.Minute), keysRead: 1, sent: 1},
		{name: "idle", at: start.Add(160 * time.Minute)},
	}
	for i, step := range steps {
		if i == 2 {
			mapped.Store(true)
		}
		g := export.Hour
		st, err := p.Run(ctx, export.Month.Start(step.at), g.Next(g.Start(step.at)), step.at)
		if err != nil || st.KeysRead != step.keysRead || st.Sent != step.sent || st.Open != step.open ||
			st.Skipped != step.skipped || st.SkippedKeys != step.skippedKeys || st.KeysDiffering != 0 {
			t.Fatalf("%s: %+v, %v; want %+v", step.name, st, err, step)
		}
	}
	if b := rc.billed(); b["acct_a"] != 10 || b["acct_b"] != 4 || b["acct_c"] != 6 {
		t.Fatalf("billed %v", b)
	}
}

// On the plan calendar a change of the catalogue's plans can re-cut any
// key's open periods: the pass after it reads every key, the one after
// that nothing.
func TestIncrementalPassAfterPlanChange(t *testing.T) {
	e, _ := incrementalEnv(t)
	ctx := context.Background()
	start := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	e.write(t, "acct_a", "p1", start, 10, true)
	_, s, name := httpSink(t)
	p, err := sink.NewPublisher(e.pool, e.ex, s, sink.Config{Sink: name, Metrics: e.m, Granularity: export.Hour,
		Calendar: export.CalendarPlan, Incremental: true})
	if err != nil {
		t.Fatal(err)
	}
	at := start.Add(2 * time.Hour)
	for _, step := range []struct {
		name     string
		change   string
		keysRead int
	}{
		{name: "first", keysRead: -1},
		{name: "idle", keysRead: 0},
		{name: "plan assigned", change: `INSERT INTO quota_plans (name, quotas, time_zone, anchor_day, revision)
VALUES ('tokyo', '[]', 'Asia/Tokyo', 1, 1);
INSERT INTO quota_key_plans (key, plan, revision) VALUES ('acct_a', 'tokyo', 1)`, keysRead: -1},
		{name: "idle again", keysRead: 0},
	} {
		if step.change != "" {
			if _, err := e.pool.Exec(ctx, step.change); err != nil {
				t.Fatal(err)
			}
		}
		st, err := p.Run(ctx, export.Month.Start(at), at, at)
		if err != nil || st.KeysRead != step.keysRead {
			t.Fatalf("%s: %+v, %v; want %d keys read", step.name, st, err, step.keysRead)
		}
	}
}
