package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// monthStart is the first instant of the UTC month m months after t's.
func monthStart(t time.Time, m int) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()+time.Month(m), 1, 0, 0, 0, 0, time.UTC)
}

// publishBatchMsg publishes reps as one batch message whose
// ledger.HeaderReports says claimed (none when 0).
func publishBatchMsg(t testing.TB, js jetstream.JetStream, reps []ledger.Report, claimed int) {
	t.Helper()
	body, id, err := ledger.EncodeBatch(reps)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: ledger.DefaultStreamConfig().Subject(reps[0].Region, reps[0].ProcessID), Data: body, Header: nats.Header{}}
	msg.Header.Set(ledger.HeaderEncoding, ledger.EncodingBatch)
	if claimed > 0 {
		msg.Header.Set(ledger.HeaderReports, fmt.Sprint(claimed))
	}
	if _, err := js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}

// partitions counts the attached partitions of usage_reports.
func partitions(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_reports'::regclass`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// reasonCounts counts the dead letters by reason.
func reasonCounts(pool *pgxpool.Pool) (map[string]int, error) {
	rows, err := pool.Query(context.Background(), `SELECT reason, count(*) FROM usage_dead_letters GROUP BY reason`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			return nil, err
		}
		out[r] = n
	}
	return out, rows.Err()
}

// Issue 28, item 2: a batch of reports in 2,000 different months (a
// thousand years back and forth) made the writer create 2,000 partitions
// in one transaction; Postgres ran out of lock slots (53200, transient),
// the batch was retried for ever and nothing behind it was written. Now
// the reports outside [now − MaxReportAge, now + MaxReportSkew] are
// dead-lettered (too_old, future), the two in range are written, and the
// good message published after the batch is written too.
func TestManyMonthsBatchDoesNotStallIngestion(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	now := time.Now().UTC()
	d := reconcile.DefaultConfig()
	var batch []ledger.Report
	inRange := int64(0)
	for i := -1000; i < 1000; i++ {
		start := monthStart(now, i)
		if i == 0 { // this month: in range
			start = now.Add(-time.Hour).Truncate(time.Minute)
		}
		r := ledger.Report{Key: "wide", WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: "p1", Region: "eu",
			Spent: 1, Leased: 1, Seq: 1, SentAt: now}
		batch = append(batch, r)
		if !start.Before(now.Add(-d.MaxReportAge)) && !start.After(now.Add(d.MaxReportSkew)) {
			inRange++
		}
	}
	publishBatchMsg(t, js, batch, len(batch))
	good := ledger.Report{Key: "good", WindowStart: now.Add(-time.Minute).Truncate(time.Minute), ProcessID: "p1", Region: "eu",
		Spent: 5, Leased: 5, Seq: 1, SentAt: now, Final: true}
	good.WindowEnd = good.WindowStart.Add(time.Minute)
	before := partitions(t, pool)
	publish(t, js, "", good)
	startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) {
		c.MaxReportAge, c.MaxReportSkew = d.MaxReportAge, d.MaxReportSkew
	})
	waitSpent(t, pool, map[string]int64{"wide": inRange, "good": 5}, 60*time.Second)
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		got, err := reasonCounts(pool)
		if err != nil {
			return err
		}
		if got["too_old"]+got["future"] != len(batch)-int(inRange) || got["too_old"] < 990 || got["future"] < 990 {
			return fmt.Errorf("dead letters %v, want %d too_old or future", got, len(batch)-int(inRange))
		}
		return nil
	})
	if n := partitions(t, pool) - before; n > int(inRange) {
		t.Fatalf("%d partitions created for %d months in range", n, inRange)
	}
}

// A Write that finds more months without a partition than
// WriterConfig.MaxNewPartitions creates that many, the newest first,
// writes their rows and names the rest in a *MonthsError; the Reconciler
// hands such a message back to the stream, and later batches create the
// next partitions until every report is written, none dead-lettered.
func TestNewPartitionsPerBatchAreBounded(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	w, err := reconcile.NewWriterWithConfig(pool, reconcile.WriterConfig{Parallel: 1, MinPartRows: 1000, MaxNewPartitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // no partition exists yet
	var reps []ledger.Report
	for i := range 8 {
		r := rep("k", "p1", 1, 1, 1, true)
		r.WindowStart = monthStart(base, i).Add(time.Hour)
		r.WindowEnd = r.WindowStart.Add(time.Minute)
		reps = append(reps, r)
	}
	before := partitions(t, pool)
	res, err := w.Write(context.Background(), reps)
	var merr *reconcile.MonthsError
	if !errors.As(err, &merr) || len(merr.Waiting) != 5 || len(merr.Detached) != 0 {
		t.Fatalf("Write: %v; want 5 months waiting", err)
	}
	if res.Inserted != 3 || partitions(t, pool)-before != 3 {
		t.Fatalf("inserted %d rows, created %d partitions; want 3 and 3", res.Inserted, partitions(t, pool)-before)
	}
	if !merr.Waiting[0].Equal(monthStart(base, 4)) {
		t.Fatalf("waiting %v: want the oldest five months (newest created first)", merr.Waiting)
	}

	js := connect(t, testserver.StartNATS(t).URL)
	for i := range reps {
		reps[i].Key = "via-stream"
	}
	publishBatchMsg(t, js, reps, len(reps))
	x := startReconciler(t, js, w, func(c *reconcile.Config) { c.MaxReportSkew = 0 }) // 2030 is the future
	waitSpent(t, pool, map[string]int64{"k": 3, "via-stream": 8}, 30*time.Second)
	waitConsumerDrained(t, js)
	if n := sumVec(x.m.DeadLetters); n != 0 {
		t.Fatalf("%v dead letters, want none", n)
	}
}

// Issue 28, item 8: gathering trusted ledger.HeaderReports, so messages
// that each say one report but hold ledger.MaxBatchReports were gathered
// by the thousand. Now a gathered batch holds at most BatchSize +
// MaxBatchReports − 1 decoded reports (the quota.reports of its span).
func TestGatherBoundedByDecodedReports(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	const messages = 6
	for i := range messages {
		reps := make([]ledger.Report, ledger.MaxBatchReports)
		for j := range reps {
			reps[j] = rep(fmt.Sprintf("m%d", i), "p1", int64(j+1), 1, 1, false)
		}
		publishBatchMsg(t, js, reps, 1) // the header lies
	}
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	const batchSize = 1000
	startReconciler(t, js, reconcile.NewWriter(pool), func(c *reconcile.Config) {
		c.Tracer = tp.Tracer("test")
		c.BatchSize = batchSize
		c.Clock = clock.NewManual(time.Now()) // the clock stands still: only the budget ends a gathering
	})
	want := map[string]int64{}
	for i := range messages {
		want[fmt.Sprintf("m%d", i)] = 1
	}
	waitSpent(t, pool, want, 30*time.Second)
	waitConsumerDrained(t, js)
	most := int64(0)
	for _, s := range sr.Ended() {
		if s.Name() != "quota.reconcile.batch" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "quota.reports" {
				most = max(most, kv.Value.AsInt64())
			}
		}
	}
	if limit := int64(batchSize + ledger.MaxBatchReports - 1); most == 0 || most > limit {
		t.Fatalf("largest gathered batch held %d decoded reports, budget %d", most, limit)
	}
}

// Issue 27, build item 6: a late report for a month retention detached
// was written to a new partition holding it alone, and that month's
// export shrank to it. Now it is dead-lettered (reason detached), no
// partition is created, and the export is unchanged.
func TestLateReportForDetachedMonthIsDeadLettered(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	ctx := context.Background()
	if _, err := reconcile.NewWriter(pool).Write(ctx, []ledger.Report{rep("acct", "p1", 1, 40, 40, true)}); err != nil {
		t.Fatal(err)
	}
	month := monthStart(t0, 0)
	var detached []string
	rows, err := pool.Query(ctx, `SELECT usage_detach_partitions($1)`, monthStart(t0, 1))
	if err == nil {
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			detached = append(detached, s)
		}
		err = rows.Err()
	}
	if err != nil || len(detached) == 0 {
		t.Fatalf("detach: %v, %v", detached, err)
	}
	exportMonth := func() string {
		ex, err := export.New(pool, export.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		err = ex.Export(ctx, export.Query{From: month, To: monthStart(month, 1), Granularity: export.Month, Now: time.Now()},
			func(rs []export.Row) error {
				for _, r := range rs {
					out = append(out, fmt.Sprintf("%s %d %d", r.Key, r.Allowed, r.Billed))
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(out)
	}
	exportBefore, partsBefore := exportMonth(), partitions(t, pool)

	js := connect(t, testserver.StartNATS(t).URL)
	late := rep("acct", "p2", 1, 7, 7, true)
	late.WindowStart, late.WindowEnd = t0.Add(time.Hour), t0.Add(time.Hour+time.Minute)
	later := rep("other", "p1", 1, 2, 2, true)
	later.WindowStart, later.WindowEnd = time.Now().UTC().Truncate(time.Minute), time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	publish(t, js, "", late)
	publish(t, js, "", later)
	x := startReconciler(t, js, reconcile.NewWriter(pool), nil)
	waitSpent(t, pool, map[string]int64{"other": 2}, 10*time.Second)
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		got, err := reasonCounts(pool)
		if err != nil || got["detached"] != 1 || len(got) != 1 {
			return fmt.Errorf("dead letters %v (%v), want one detached", got, err)
		}
		return nil
	})
	waitConsumerDrained(t, js)
	if n := val(x.m.DeadLetters.WithLabelValues("detached")); n != 1 {
		t.Fatalf("dead_letters_total{reason=detached} = %v, want 1", n)
	}
	if got, parts := exportMonth(), partitions(t, pool); got != exportBefore || parts != partsBefore {
		t.Fatalf("after the late report: export %s (was %s), %d partitions (was %d)", got, exportBefore, parts, partsBefore)
	}
}

// Issue 28, item 3: 2,000 late rows (p1~late<i>) of one key and window,
// each at MaxCounter, pass every check, and their sum overflowed bigint:
// that key's /v1/usage failed, and the month's export failed for every
// key. Now the other key's usage and the export still answer, and the
// hostile key's answer is clear: billing.ErrOverflow, and in the export
// saturated figures on a row that is not Complete (no sink bills it).
func TestOverflowingKeyDoesNotBreakBilling(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	var hostile []ledger.Report
	for i := range 2000 {
		r := rep("hostile", fmt.Sprintf("p1~late%d", i), 1, reconcile.MaxCounter, 0, true)
		hostile = append(hostile, r)
	}
	publishBatchMsg(t, js, hostile, len(hostile))
	publish(t, js, "", rep("normal", "p1", 1, 7, 7, true))
	startReconciler(t, js, reconcile.NewWriter(pool), nil)
	ctx := context.Background()
	testserver.WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_reports`).Scan(&n); err != nil || n != len(hostile)+1 {
			return fmt.Errorf("%d rows (%v), want %d", n, err, len(hostile)+1)
		}
		return nil
	})

	led, err := billing.NewLedger(pool, billing.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []billing.Granularity{billing.Hour, billing.Day, billing.Window} {
		q := billing.Query{Key: "normal", From: t0.Truncate(time.Hour), To: t0.Truncate(time.Hour).Add(24 * time.Hour), Granularity: g}
		res, err := led.Usage(ctx, q)
		if err != nil || res.Totals.Net != 7 {
			t.Fatalf("%s usage of the other key: %+v, %v; want spent 7", g, res.Totals, err)
		}
		q.Key = "hostile"
		if res, err := led.Usage(ctx, q); !errors.Is(err, billing.ErrOverflow) {
			t.Fatalf("%s usage of the hostile key: %+v, %v; want ErrOverflow", g, res.Totals, err)
		}
	}

	ex, err := export.New(pool, export.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]export.Row{}
	err = ex.Export(ctx, export.Query{From: monthStart(t0, 0), To: monthStart(t0, 1), Granularity: export.Month, Now: time.Now()},
		func(rs []export.Row) error {
			for _, r := range rs {
				got[r.Key] = r
			}
			return nil
		})
	if err != nil {
		t.Fatalf("month export: %v", err)
	}
	if n := got["normal"]; n.Allowed != 7 || n.Billed != 7 || !n.Complete {
		t.Fatalf("export of the other key: %+v", n)
	}
	if h := got["hostile"]; h.Complete || h.Allowed != math.MaxInt64 || h.Billed != math.MaxInt64 {
		t.Fatalf("export of the hostile key: %+v; want saturated figures, not Complete", h)
	}
}
