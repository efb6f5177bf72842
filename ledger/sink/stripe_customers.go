package sink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// StripeCustomer maps a key to the Stripe customer billed for it
// (stripe_customers, migration 005).
type StripeCustomer struct {
	Key        string
	CustomerID string // cus_…
	UpdatedAt  time.Time
}

// ErrBadCustomer: not a Stripe customer id (cus_ and letters or digits).
var ErrBadCustomer = errors.New("sink: not a Stripe customer id (want cus_…)")

var customerID = regexp.MustCompile(`^cus_[A-Za-z0-9]+$`)

// Execer is the part of a pgx pool or connection that SetStripeCustomer
// uses.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SetStripeCustomer maps key to customer, replacing any earlier mapping.
// Events already sent keep the customer they named; later events, resends
// of refused ones included, name the new one.
func SetStripeCustomer(ctx context.Context, db Execer, key, customer string) error {
	if key == "" {
		return errors.New("sink: empty key")
	}
	if !customerID.MatchString(customer) {
		return ErrBadCustomer
	}
	_, err := db.Exec(ctx, `INSERT INTO stripe_customers (key, stripe_customer_id) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET stripe_customer_id = EXCLUDED.stripe_customer_id, updated_at = now()`, key, customer)
	if err != nil {
		return fmt.Errorf("sink: set stripe customer: %w", err)
	}
	return nil
}

// StripeCustomers returns every mapping, by key.
func StripeCustomers(ctx context.Context, db Querier) ([]StripeCustomer, error) {
	rows, err := db.Query(ctx, `SELECT key, stripe_customer_id, updated_at FROM stripe_customers ORDER BY key`)
	if err != nil {
		return nil, fmt.Errorf("sink: stripe customers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StripeCustomer, error) {
		var c StripeCustomer
		err := r.Scan(&c.Key, &c.CustomerID, &c.UpdatedAt)
		c.UpdatedAt = c.UpdatedAt.UTC()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("sink: stripe customers: %w", err)
	}
	return out, nil
}

func stripeCustomerMap(ctx context.Context, db Querier) (map[string]string, error) {
	cs, err := StripeCustomers(ctx, db)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(cs))
	for _, c := range cs {
		m[c.Key] = c.CustomerID
	}
	return m, nil
}
