package migrations_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/migrations"
)

// migrateTo moves the database on conn to version v.
// connectNewDatabase connects to a new, empty database, closed when the
// test ends.
func connectNewDatabase(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testserver.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

func migrateTo(t *testing.T, conn *pgx.Conn, v int32) {
	t.Helper()
	ctx := context.Background()
	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatalf("migrate to %d: %v", v, err)
	}
}

// ledgerRows is every row of usage_reports, one string each, sorted.
func ledgerRows(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	return queryStrings(t, conn, `SELECT concat_ws('|', key, window_start AT TIME ZONE 'UTC', process_id,
		window_end AT TIME ZONE 'UTC', region, spent, leased, rejected, degraded, final, seq, sent_at, first_seen, updated_at)
		FROM usage_reports ORDER BY 1`)
}

// 003 converts a ledger written under 001/002 in place: every row is still
// there, unchanged, in the partition of its month, and the billing views
// read it; going down to 002 keeps the rows too.
func TestPartitioningKeepsRows(t *testing.T) {
	url := testserver.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	migrateTo(t, conn, 2)
	starts := []string{"1999-12-31 23:59:30Z", "2026-02-28 23:59:30Z", "2026-03-01 00:00:00Z", "2026-03-15 12:00:30Z", "2100-07-01 00:00:00Z"}
	for i, s := range starts {
		for _, p := range []string{"p1", "p2"} {
			if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, leased,
				rejected, degraded, final, seq, sent_at, first_seen, updated_at)
				VALUES ($1, $2::timestamptz, $3, $2::timestamptz + interval '1 minute', 'eu', $4::bigint, $4::bigint + 1, 1, $5, $6, 3,
				        $2::timestamptz, '2026-01-01Z', '2026-01-02Z')`,
				fmt.Sprintf("acct_%d", i%2), s, p, 10*i+1, i%2, p == "p1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := ledgerRows(t, conn)
	var billedBefore []int64
	for _, q := range billingQueries {
		var n int64
		if err := conn.QueryRow(ctx, q.before).Scan(&n); err != nil {
			t.Fatal(err)
		}
		billedBefore = append(billedBefore, n)
	}

	if _, err := migrations.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	if after := ledgerRows(t, conn); !slices.Equal(after, before) {
		t.Fatalf("rows after 003:\n%s\nwant:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	for i, q := range billingQueries {
		sql := cmp.Or(q.after, q.before)
		var n int64
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil || n != billedBefore[i] {
			t.Fatalf("%s: %d after 003, %d before (%v)", sql, n, billedBefore[i], err)
		}
	}
	var wrong int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM usage_reports
		WHERE tableoid::regclass::text <> 'usage_reports_p' || to_char(window_start AT TIME ZONE 'UTC', 'YYYYMM')`).Scan(&wrong); err != nil || wrong != 0 {
		t.Fatalf("%d rows outside their month's partition (%v)", wrong, err)
	}

	migrateTo(t, conn, 2)
	if after := ledgerRows(t, conn); !slices.Equal(after, before) {
		t.Fatalf("rows after going down to 002:\n%s\nwant:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
}

// billingQueries each return one number read through a billing view,
// under 002 and under the latest schema. The gross allowed cost is the
// views' spent under 002 and their allowed since 013 (023 removed spent).
var billingQueries = []struct{ before, after string }{
	{`SELECT count(*) FROM usage_windows`, ""},
	{`SELECT sum(spent) FROM usage_windows WHERE key = 'acct_1' AND window_start >= '2026-02-01Z' AND window_start < '2026-04-01Z'`,
		`SELECT sum(allowed) FROM usage_windows WHERE key = 'acct_1' AND window_start >= '2026-02-01Z' AND window_start < '2026-04-01Z'`},
	{`SELECT sum(spent) FROM usage_by_day WHERE key = 'acct_0'`, `SELECT sum(allowed) FROM usage_by_day WHERE key = 'acct_0'`},
	{`SELECT sum(leased) FROM usage_by_hour`, ""},
	{`SELECT count(*) FROM usage_degraded_windows`, ""},
	{`SELECT count(*) FROM usage_incomplete_windows`, ""},
	{`SELECT sum(over_authorized) FROM usage_over_authorization`, ""},
}

// queryStrings runs query, whose rows are one text column each, and
// returns them.
func queryStrings(t *testing.T, conn *pgx.Conn, query string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, query)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// partitions lists usage_reports' partitions by name.
func partitions(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	return queryStrings(t, conn, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'usage_reports'::regclass ORDER BY 1`)
}

// Retention detaches the partitions of months that ended by the cutoff,
// keeps their rows in the renamed tables, and leaves the rest; a late row
// for a detached month goes to a new partition and is detached again later.
func TestRetentionDetachesOldMonths(t *testing.T) {
	url := testserver.NewDatabase(t)
	ctx := context.Background()
	if _, err := migrations.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	insert := func(month string) {
		t.Helper()
		if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition($1::timestamptz)`, month); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, seq, sent_at)
			VALUES ('acct', $1::timestamptz + interval '1 day', 'p1', $1::timestamptz + interval '1 day 1 minute', 'eu', 5, 1, now())`, month); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"2025-12-01Z", "2026-01-01Z", "2026-02-01Z", "2026-03-01Z"} {
		insert(m)
	}
	detach := func(cutoff string) []string {
		t.Helper()
		return queryStrings(t, conn, `SELECT usage_detach_partitions($1::timestamptz)`, cutoff)
	}
	// Cut inside February: December and January ended, February did not.
	got := detach("2026-02-15Z")
	if len(got) != 2 || !strings.HasPrefix(got[0], "usage_reports_p202512_detached_") || !strings.HasPrefix(got[1], "usage_reports_p202601_detached_") {
		t.Fatalf("detached %v, want the partitions of 2025-12 and 2026-01", got)
	}
	parts := partitions(t, conn)
	for _, gone := range []string{"usage_reports_p202512", "usage_reports_p202601"} {
		if slices.Contains(parts, gone) {
			t.Fatalf("%s still attached: %v", gone, parts)
		}
	}
	for _, kept := range []string{"usage_reports_p202602", "usage_reports_p202603"} {
		if !slices.Contains(parts, kept) {
			t.Fatalf("%s detached: %v", kept, parts)
		}
	}
	var inView, inDetached int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM usage_windows`).Scan(&inView); err != nil || inView != 2 {
		t.Fatalf("usage_windows has %d windows, want 2 (%v)", inView, err)
	}
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT sum(spent) FROM %s`, pgx.Identifier{got[0]}.Sanitize())).Scan(&inDetached); err != nil || inDetached != 5 {
		t.Fatalf("detached table holds spent %d, want 5 (%v)", inDetached, err)
	}
	// A late report for a detached month is written, and retention takes
	// its new partition again without a clash of names.
	insert("2026-01-01Z")
	if again := detach("2026-02-01Z"); len(again) != 1 || !strings.HasPrefix(again[0], "usage_reports_p202601_detached_") || again[0] == got[1] {
		t.Fatalf("second detach %v (first %v)", again, got)
	}
	if again := detach("2026-02-01Z"); len(again) != 0 {
		t.Fatalf("detach again detached %v", again)
	}

	// By age: keep the current month and the one before it.
	// Retention judges months by Postgres' clock (now() in SQL): so does
	// the test, whatever this process's clock says.
	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	now = now.UTC()
	cur := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	for _, m := range []time.Time{cur.AddDate(0, -2, 0), cur.AddDate(0, -1, 0), cur} {
		insert(m.Format(time.RFC3339))
	}
	rows, err := conn.Query(ctx, `SELECT usage_retain_months(1)`)
	if err != nil {
		t.Fatal(err)
	}
	gotAge, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	old := "usage_reports_p" + cur.AddDate(0, -2, 0).Format("200601")
	for _, name := range gotAge {
		if strings.HasPrefix(name, old+"_detached_") {
			old = ""
		}
	}
	parts = partitions(t, conn)
	if old != "" || !slices.Contains(parts, "usage_reports_p"+cur.AddDate(0, -1, 0).Format("200601")) ||
		!slices.Contains(parts, "usage_reports_p"+cur.Format("200601")) {
		t.Fatalf("usage_retain_months(1) detached %v, left %v", gotAge, parts)
	}
	if _, err := conn.Exec(ctx, `SELECT usage_retain_months(-1)`); err == nil {
		t.Fatal("usage_retain_months(-1) did not fail")
	}
}
