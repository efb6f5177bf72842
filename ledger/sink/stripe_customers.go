package sink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quotaplatform/quota/period"
)

// StripeCustomer maps a key to the Stripe customer billed for it
// (stripe_customers, migration 005).
type StripeCustomer struct {
	Key        string
	CustomerID string // cus_…
	// AnchorDay (1–31) and TimeZone (IANA) place the customer's invoice
	// periods: from the anchor day (a shorter month's last day) at 00:00
	// in TimeZone. Zero and nil: the UTC calendar month.
	AnchorDay int
	TimeZone  *time.Location
	UpdatedAt time.Time
}

// InvoicePeriodEnd returns the end of c's invoice period holding t: the
// period package's month (period.Calendar), so that a sink and the
// ledger's exports cut at the same instant, midnights the zone's clock
// skips included.
func (c StripeCustomer) InvoicePeriodEnd(t time.Time) time.Time {
	cal := period.Calendar{}
	if c.AnchorDay != 0 && c.TimeZone != nil {
		cal = period.Calendar{Location: c.TimeZone, AnchorDay: c.AnchorDay}
	}
	_, end := cal.Bounds(period.Month, t)
	return end
}

// Anchor is a customer's billing cycle anchor for SetStripeCustomer: Day
// 1–31 and an IANA TimeZone, or the zero Anchor for the UTC calendar
// month.
type Anchor struct {
	Day      int
	TimeZone string
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

// SetStripeAnchor sets the billing cycle anchor of key's customer (the
// zero Anchor: the UTC calendar month); the key must be mapped already
// (SetStripeCustomer). It decides which invoice a meter event sent from
// then on is stamped for (Stripe.Frame).
func SetStripeAnchor(ctx context.Context, db Execer, key string, anchor Anchor) error {
	var day, zone any
	if anchor != (Anchor{}) {
		if anchor.Day < 1 || anchor.Day > 31 {
			return fmt.Errorf("sink: anchor day must be 1 to 31, got %d", anchor.Day)
		}
		if _, err := time.LoadLocation(anchor.TimeZone); err != nil || anchor.TimeZone == "" {
			return fmt.Errorf("sink: anchor time zone %q: not an IANA zone", anchor.TimeZone)
		}
		day, zone = anchor.Day, anchor.TimeZone
	}
	tag, err := db.Exec(ctx, `UPDATE stripe_customers SET anchor_day = $2, time_zone = $3, updated_at = now() WHERE key = $1`,
		key, day, zone)
	if err != nil {
		return fmt.Errorf("sink: set stripe anchor: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errors.New("sink: set stripe anchor: key has no Stripe customer")
	}
	return nil
}

// StripeCustomers returns every mapping, by key.
func StripeCustomers(ctx context.Context, db Querier) ([]StripeCustomer, error) {
	rows, err := db.Query(ctx, `SELECT key, stripe_customer_id, coalesce(anchor_day, 0), coalesce(time_zone, ''), updated_at
FROM stripe_customers ORDER BY key`)
	if err != nil {
		return nil, fmt.Errorf("sink: stripe customers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StripeCustomer, error) {
		var c StripeCustomer
		var zone string
		if err := r.Scan(&c.Key, &c.CustomerID, &c.AnchorDay, &zone, &c.UpdatedAt); err != nil {
			return c, err
		}
		c.UpdatedAt = c.UpdatedAt.UTC()
		if zone != "" {
			loc, err := time.LoadLocation(zone)
			if err != nil {
				return c, fmt.Errorf("key's time_zone %q: %w", zone, err)
			}
			c.TimeZone = loc
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("sink: stripe customers: %w", err)
	}
	return out, nil
}

func stripeCustomerMap(ctx context.Context, db Querier) (map[string]StripeCustomer, error) {
	cs, err := StripeCustomers(ctx, db)
	if err != nil {
		return nil, err
	}
	m := make(map[string]StripeCustomer, len(cs))
	for _, c := range cs {
		m[c.Key] = c
	}
	return m, nil
}
