package planmirror_test

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/catalogtest"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger/planmirror"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/period"
)

// env is a private NATS with the catalogue bucket, a control-plane
// catalogue writing it, and a migrated ledger database.
type env struct {
	js     jetstream.JetStream
	writer *catalog.Catalog
	pool   *pgxpool.Pool
}

// quietCatalog is the catalogue's default configuration, retrying fast
// and logging nothing.
func quietCatalog() catalog.Config {
	cfg := catalog.DefaultConfig()
	cfg.RetryInterval, cfg.Logger = 50*time.Millisecond, slog.New(slog.DiscardHandler)
	return cfg
}

func newEnv(t *testing.T) *env {
	t.Helper()
	n := testserver.StartNATS(t)
	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w := catalogtest.Start(t, js, quietCatalog())
	_, pool := ledgertest.Database(t)
	return &env{js: js, writer: w, pool: pool}
}

// start runs a Mirror until the test ends or stop is called.
func (e *env) start(t *testing.T) (m *planmirror.Mirror, stop func()) {
	t.Helper()
	cfg := planmirror.DefaultConfig()
	cfg.RetryInterval, cfg.Logger = 50*time.Millisecond, slog.New(slog.DiscardHandler)
	m, err := planmirror.New(e.js, e.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	}
	t.Cleanup(stop)
	return m, stop
}

// wait waits until m is current to rev.
func wait(t *testing.T, m *planmirror.Mirror, rev uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.WaitRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
}

// rows dumps both tables, one line per row, without revisions.
func (e *env) rows(t *testing.T) []string {
	t.Helper()
	return e.lines(t, `
		SELECT concat_ws('|', 'plan', name, quotas::text, time_zone, anchor_day, CASE WHEN deleted THEN 'deleted' END) FROM quota_plans
		UNION ALL
		SELECT concat_ws('|', 'key', key, plan, CASE WHEN deleted THEN 'deleted' END) FROM quota_key_plans`)
}

// full dumps both tables with revisions and update times.
func (e *env) full(t *testing.T) []string {
	t.Helper()
	return e.lines(t, `
		SELECT concat_ws('|', name, quotas::text, time_zone, anchor_day, deleted, revision, updated_at) FROM quota_plans
		UNION ALL
		SELECT concat_ws('|', key, plan, deleted, revision, updated_at) FROM quota_key_plans`)
}

// lines runs query, which selects one text column, and returns its rows
// sorted bytewise (not in the database's collation).
func (e *env) lines(t *testing.T, query string) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func (e *env) revision(t *testing.T, table, column, name string) int64 {
	t.Helper()
	var rev int64
	if err := e.pool.QueryRow(context.Background(), "SELECT revision FROM "+table+" WHERE "+column+" = $1", name).Scan(&rev); err != nil {
		t.Fatalf("%s %s: %v", table, name, err)
	}
	return rev
}

func quotaPlan(t *testing.T, zone string, anchor int, qs ...limit.Quota) limit.Plan {
	t.Helper()
	p := limit.Plan{Rate: 10, Capacity: 100, TimeZone: zone, AnchorDay: anchor}
	var err error
	if p.Quotas, err = limit.NewQuotas(qs); err != nil {
		t.Fatal(err)
	}
	return p
}

func must(t *testing.T) func(uint64, error) uint64 {
	return func(rev uint64, err error) uint64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
}

// The mirror starts from the bucket's full state (what was written, and
// deleted, while no mirror ran; rows the bucket no longer holds become
// tombstones), then follows puts, deletions and reassignments, skips an
// entry that does not decode, and never takes a row back to an earlier
// revision. Starting again changes nothing.
func TestMirrorFollowsCatalogue(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ok := must(t)
	w := e.writer

	// Before any mirror runs: rows of a former life of the catalogue (a
	// plan and a key it no longer holds), a row from a later revision
	// than the bucket has (written by a newer reconciler), and the
	// bucket's entries, one of them deleted.
	if _, err := e.pool.Exec(ctx, `INSERT INTO quota_plans (name, quotas, revision) VALUES ('gone', '[{"period":"day","limit":5}]', 1), ('future', '[]', 1000000);
		INSERT INTO quota_key_plans (key, plan, revision) VALUES ('acct_gone', 'gone', 1)`); err != nil {
		t.Fatal(err)
	}
	ok(w.PutPlan(ctx, "test", "pro", quotaPlan(t, "Europe/Paris", 31, limit.Quota{Period: period.Month, Limit: 1_000_000},
		limit.Quota{Period: period.Day, Limit: 50_000})))
	ok(w.PutPlan(ctx, "test", "free", quotaPlan(t, "", 0, limit.Quota{Period: period.Month, Limit: 1000})))
	ok(w.PutPlan(ctx, "test", "plain", limit.Plan{Rate: 1, Capacity: 1}))
	ok(w.PutPlan(ctx, "test", "future", limit.Plan{Rate: 1, Capacity: 1}))
	ok(w.PutPlan(ctx, "test", "old", limit.Plan{Rate: 1, Capacity: 1}))
	ok(w.Delete(ctx, "test", catalog.KindPlan, "old"))
	ok(w.Assign(ctx, "test", "acct_1", "pro"))
	ok(w.Assign(ctx, "test", "acct_2", "free"))
	ok(w.PutCost(ctx, "test", "/v1/chat", 3))
	rev := ok(w.Assign(ctx, "test", "acct_3/~", "plain")) // "/" and "~" need the bucket key's base64

	m, stop := e.start(t)
	wait(t, m, rev)
	want := []string{
		`key|acct_1|pro`,
		`key|acct_2|free`,
		`key|acct_3/~|plain`,
		`key|acct_gone|deleted`,
		`plan|free|[{"limit": 1000, "period": "month"}]||0`,
		`plan|future|[]||0`,
		`plan|gone|[]||0|deleted`,
		`plan|old|[]||0|deleted`,
		`plan|plain|[]||0`,
		`plan|pro|[{"limit": 50000, "period": "day"}, {"limit": 1000000, "period": "month"}]|Europe/Paris|31`,
	}
	if got := e.rows(t); !slices.Equal(got, want) {
		t.Fatalf("after the start:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := e.revision(t, "quota_plans", "name", "future"); r != 1000000 {
		t.Fatalf("the later row of plan future went back to revision %d", r)
	}

	steps := []struct {
		name  string
		write func() uint64
		want  []string // rows that change
	}{
		{"reassign", func() uint64 { return ok(w.Assign(ctx, "test", "acct_1", "free")) }, []string{`key|acct_1|free`}},
		{"delete an assignment", func() uint64 { return ok(w.Delete(ctx, "test", catalog.KindKey, "acct_2")) }, []string{`key|acct_2|deleted`}},
		{"assign again", func() uint64 { return ok(w.Assign(ctx, "test", "acct_2", "pro")) }, []string{`key|acct_2|pro`}},
		{"change a plan's quotas", func() uint64 {
			return ok(w.PutPlan(ctx, "test", "free", quotaPlan(t, "America/Santiago", 15, limit.Quota{Period: period.Week, Limit: 70})))
		}, []string{`plan|free|[{"limit": 70, "period": "week"}]|America/Santiago|15`}},
		{"a delete marker from another tool", func() uint64 {
			kv, err := e.js.KeyValue(ctx, "quota-catalog")
			if err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, "key."+base64.RawURLEncoding.EncodeToString([]byte("acct_3/~"))); err != nil {
				t.Fatal(err)
			}
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rev := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
			if err := w.WaitVersion(ctx, rev); err != nil { // before the plan's deletion checks its keys
				t.Fatal(err)
			}
			return rev
		}, []string{`key|acct_3/~|deleted`}},
		{"delete a plan", func() uint64 { return ok(w.Delete(ctx, "test", catalog.KindPlan, "plain")) }, []string{`plan|plain|[]||0|deleted`}},
		{"an entry that does not decode", func() uint64 {
			kv, err := e.js.KeyValue(ctx, "quota-catalog")
			if err != nil {
				t.Fatal(err)
			}
			return ok(kv.Put(ctx, "plan."+base64.RawURLEncoding.EncodeToString([]byte("pro")), []byte(`{"kind":"plan","name":"pro","rate":-1}`)))
		}, nil},
		{"an endpoint weight", func() uint64 { return ok(w.PutCost(ctx, "test", "/v1/chat", 5)) }, nil},
	}
	for _, s := range steps {
		before := e.rows(t)
		rev := s.write()
		wait(t, m, rev)
		got := e.rows(t)
		var changed []string
		for _, r := range got {
			if !slices.Contains(before, r) {
				changed = append(changed, r)
			}
		}
		if !slices.Equal(changed, s.want) || len(got) != len(before)+countNew(before, s.want) {
			t.Fatalf("%s: rows that changed:\n%s\nwant:\n%s\nall rows:\n%s", s.name, strings.Join(changed, "\n"),
				strings.Join(s.want, "\n"), strings.Join(got, "\n"))
		}
	}
	if r, want := e.revision(t, "quota_key_plans", "key", "acct_3/~"), int64(m.Revision())-3; r != want {
		t.Fatalf("the delete marker's row has revision %d, want %d", r, want)
	}

	// Stopped: changes made meanwhile are in the full state the next
	// mirror starts from; starting again without changes writes nothing.
	stop()
	ok(w.Delete(ctx, "test", catalog.KindKey, "acct_1"))
	rev = ok(w.PutPlan(ctx, "test", "new", quotaPlan(t, "Asia/Kolkata", 29, limit.Quota{Period: period.Hour, Limit: 9})))
	m, stop = e.start(t)
	wait(t, m, rev)
	for _, r := range []string{`key|acct_1|deleted`, `plan|new|[{"limit": 9, "period": "hour"}]|Asia/Kolkata|29`} {
		if got := e.rows(t); !slices.Contains(got, r) {
			t.Fatalf("after a restart, no row %q:\n%s", r, strings.Join(got, "\n"))
		}
	}
	stop()
	before := e.full(t)
	m, _ = e.start(t)
	wait(t, m, rev)
	if after := e.full(t); !slices.Equal(after, before) {
		t.Fatalf("starting again changed rows:\n%s\nbefore:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
}

// countNew is how many of want are rows before did not have by name.
func countNew(before, want []string) int {
	n := 0
	for _, w := range want {
		id := strings.Join(strings.SplitN(w, "|", 3)[:2], "|")
		if !slices.ContainsFunc(before, func(b string) bool { return strings.HasPrefix(b, id+"|") }) {
			n++
		}
	}
	return n
}

// A mirror started before the control plane created the bucket waits for
// it, then mirrors it.
func TestMirrorWaitsForBucket(t *testing.T) {
	n := testserver.StartNATS(t)
	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	url := ledgertest.MigratedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	e := &env{js: js, pool: pool}
	m, _ := e.start(t)
	w := catalogtest.Start(t, js, quietCatalog())
	if _, err := w.PutPlan(ctx, "test", "pro", limit.Plan{Rate: 1, Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	rev, err := w.Assign(ctx, "test", "acct_1", "pro")
	if err != nil {
		t.Fatal(err)
	}
	wait(t, m, rev)
	if got := e.rows(t); !slices.Equal(got, []string{"key|acct_1|pro", "plan|pro|[]||0"}) {
		t.Fatalf("rows %v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		edit  func(*planmirror.Config)
		field string
	}{
		{func(c *planmirror.Config) { c.Bucket = "" }, "Bucket"},
		{func(c *planmirror.Config) { c.RetryInterval = 0 }, "RetryInterval"},
		{func(c *planmirror.Config) { c.WriteTimeout = -1 }, "WriteTimeout"},
		{func(c *planmirror.Config) { c.MaxBatch = 0 }, "MaxBatch"},
	} {
		cfg := planmirror.DefaultConfig()
		tc.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v", tc.field, err)
		}
	}
	cfg := planmirror.DefaultConfig()
	if err := cfg.Validate(); err != nil || cfg.Bucket != catalog.DefaultConfig().Bucket {
		t.Fatalf("defaults: %v, bucket %q", err, cfg.Bucket)
	}
}

// While the ledger refuses writes the mirror retries with a full read of
// the bucket, and once it accepts them again catches up with what changed
// meanwhile.
func TestMirrorRecoversFromLedgerFailure(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok := must(t)
	ok(e.writer.PutPlan(ctx, "test", "pro", limit.Plan{Rate: 1, Capacity: 1}))
	m, _ := e.start(t)
	wait(t, m, ok(e.writer.Assign(ctx, "test", "acct_1", "pro")))
	if _, err := e.pool.Exec(ctx, `ALTER TABLE quota_key_plans RENAME TO quota_key_plans_away`); err != nil {
		t.Fatal(err)
	}
	rev := ok(e.writer.Assign(ctx, "test", "acct_2", "pro"))
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if m.Synced() {
			return errors.New("the mirror has not noticed the failed write")
		}
		return nil
	})
	if _, err := e.pool.Exec(ctx, `ALTER TABLE quota_key_plans_away RENAME TO quota_key_plans`); err != nil {
		t.Fatal(err)
	}
	wait(t, m, rev)
	if got, want := e.rows(t), []string{"key|acct_1|pro", "key|acct_2|pro", "plan|pro|[]||0"}; !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
}
