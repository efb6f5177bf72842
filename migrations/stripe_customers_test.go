package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/migrations"
)

// 005 creates stripe_customers, whose check refuses an id that is not a
// customer's, and its down part drops it and leaves 004's table.
func TestStripeCustomersMigration(t *testing.T) {
	url := testserver.NewDatabase(t)
	ctx := context.Background()
	if v, err := migrations.Migrate(ctx, url); err != nil || v < 5 {
		t.Fatalf("version %d, %v", v, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	insert := `INSERT INTO stripe_customers (key, stripe_customer_id) VALUES ($1, $2)`
	if _, err := conn.Exec(ctx, insert, "acct_a", "cus_NffrFeUfNV2Hib"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"acct_a", "cus_Other"}, {"acct_b", "sub_123"}, {"acct_c", "cus_"}, {"acct_d", "cus_a;b"}} {
		if _, err := conn.Exec(ctx, insert, bad[0], bad[1]); err == nil {
			t.Errorf("accepted key %q customer %q", bad[0], bad[1])
		}
	}
	m, err := migrate.NewMigrator(ctx, conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	var customers, events bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('stripe_customers') IS NOT NULL, to_regclass('billing_sink_events') IS NOT NULL`).
		Scan(&customers, &events); err != nil || customers || !events {
		t.Fatalf("after down to 4: stripe_customers %v billing_sink_events %v, %v", customers, events, err)
	}
}
