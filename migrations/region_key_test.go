package migrations_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/quotaplatform/quota/migrations"
)

// primaryKeys returns the primary key definition of usage_reports and of
// each of its partitions, by table name.
func primaryKeys(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT c.relname::text, pg_get_constraintdef(k.oid)
		FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
		WHERE k.contype = 'p' AND (c.oid = 'usage_reports'::regclass
		   OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'usage_reports'::regclass))`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var table, def string
		if err := rows.Scan(&table, &def); err != nil {
			t.Fatal(err)
		}
		out[table] = def
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// 012 puts the region in usage_reports' primary key, on the partitioned
// table and every partition (those that exist and those created later),
// keeping every row and every billed figure; two regions may then hold
// rows of one (key, window, process), one region still only one. Going
// down refuses while two regions share such a row, and otherwise restores
// the old key with the rows unchanged.
func TestRegionInPrimaryKey(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 11)
	insert := func(region, process, start string) error {
		_, err := conn.Exec(ctx, `SELECT usage_ensure_partition($1::timestamptz)`, start)
		if err == nil {
			_, err = conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, leased,
				final, seq, sent_at, first_seen, updated_at)
				VALUES ('acct', $1::timestamptz, $2, $1::timestamptz + interval '1 minute', $3, 7, 9, true, 2, $1::timestamptz,
				        '2026-01-01Z', '2026-01-02Z')`, start, process, region)
		}
		return err
	}
	for _, r := range []struct{ region, process, start string }{
		{"eu", "eu-1", "2026-02-10 10:00:00Z"}, {"us", "us-1", "2026-02-10 10:00:00Z"}, {"eu", "eu-1", "2026-03-10 10:00:00Z"},
	} {
		if err := insert(r.region, r.process, r.start); err != nil {
			t.Fatal(err)
		}
	}
	before := ledgerRows(t, conn)
	billed := func() []int64 {
		var out []int64
		for _, q := range billingQueries { // at 011 and 012: before 023
			var n int64
			if err := conn.QueryRow(ctx, `SELECT coalesce((`+q.before+`), 0)`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	billedBefore := billed()

	migrateTo(t, conn, 12)
	if after := ledgerRows(t, conn); !slices.Equal(after, before) {
		t.Fatalf("rows after 012:\n%s\nwant:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	if after := billed(); !slices.Equal(after, billedBefore) {
		t.Fatalf("billed after 012 %v, before %v", after, billedBefore)
	}
	// A month whose partition is created after the migration takes the
	// parent's key too.
	if err := insert("eu", "eu-1", "2026-04-10 10:00:00Z"); err != nil {
		t.Fatal(err)
	}
	keys := primaryKeys(t, conn)
	for _, table := range []string{"usage_reports", "usage_reports_p202602", "usage_reports_p202603", "usage_reports_p202604"} {
		if got, want := keys[table], "PRIMARY KEY (key, window_start, region, process_id)"; got != want {
			t.Errorf("%s: %q, want %q (all keys: %v)", table, got, want, keys)
		}
	}
	// ap's row naming eu's process is a row of its own; a second row of
	// ap for it is refused.
	if err := insert("ap", "eu-1", "2026-02-10 10:00:00Z"); err != nil {
		t.Fatalf("ap's row for eu-1 beside eu's: %v", err)
	}
	if err := insert("ap", "eu-1", "2026-02-10 10:00:00Z"); err == nil || !strings.Contains(err.Error(), "SQLSTATE 23505") {
		t.Fatalf("a second ap row for eu-1: %v, want a primary key violation", err)
	}

	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 11); err == nil || !strings.Contains(err.Error(), "held by more than one region") {
		t.Fatalf("down to 011 with two regions on one row: %v, want refused", err)
	}
	if v, err := m.GetCurrentVersion(ctx); err != nil || v != 12 {
		t.Fatalf("version %d after a refused down (%v), want 12", v, err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM usage_reports WHERE region = 'ap' OR window_start >= '2026-04-01Z'`); err != nil {
		t.Fatal(err)
	}
	migrateTo(t, conn, 11)
	if after := ledgerRows(t, conn); !slices.Equal(after, before) {
		t.Fatalf("rows after going down to 011:\n%s\nwant:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	if got := primaryKeys(t, conn)["usage_reports_p202602"]; got != "PRIMARY KEY (key, window_start, process_id)" {
		t.Fatalf("after going down: %q", got)
	}
}
