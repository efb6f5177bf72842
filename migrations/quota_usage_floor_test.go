package migrations_test

import (
	"context"
	"testing"
)

// 016 floors each row's net at zero in a key's quota figure, as the quota
// base does: a forged row refunding the largest counter no longer makes
// the month's used figure negative (or its remaining larger than the
// quota). Going down restores 008's sum.
func TestQuotaUsageFloorsEachRow(t *testing.T) {
	ctx := context.Background()
	conn := connectNewDatabase(t)
	migrateTo(t, conn, 16)
	if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition('2026-11-10Z');
		INSERT INTO quota_plans (name, quotas, revision) VALUES ('metered', '[{"period":"month","limit":1000}]', 1);
		INSERT INTO quota_key_plans (key, plan, revision) VALUES ('acct', 'metered', 2)`); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		process, region string
		spent, refunded int64
	}{
		{"eu-1", "eu", 40, 0},
		{"us-forged", "us", 0, 9007199254740991},
	} {
		if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, refunded, seq, sent_at)
			VALUES ('acct', '2026-11-10 10:00Z', $1, '2026-11-10 10:01Z', $2, $3, $4, 1, '2026-11-10 10:01Z')`,
			r.process, r.region, r.spent, r.refunded); err != nil {
			t.Fatal(err)
		}
	}
	used := func() (used, remaining int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT used, remaining FROM quota_usage('acct', '2026-11-20Z')`).Scan(&used, &remaining); err != nil {
			t.Fatal(err)
		}
		return used, remaining
	}
	if u, r := used(); u != 40 || r != 960 {
		t.Fatalf("used %d remaining %d, want 40 and 960: the forged row counts as nothing, not as a credit", u, r)
	}
	migrateTo(t, conn, 15)
	if u, _ := used(); u != 40-9007199254740991 {
		t.Fatalf("after going down, used %d, want 008's plain sum %d", u, int64(40-9007199254740991))
	}
}
