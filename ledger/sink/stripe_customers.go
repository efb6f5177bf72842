package sink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quotaplatform/quota/period"
)

// StripeCustomer maps a key to the Stripe customer billed for it from
// ValidFrom on (stripe_customer_mappings, migration 015; stripe_customers
// holds the current one).
type StripeCustomer struct {
	Key        string
	CustomerID string // cus_…
	// ValidFrom is the first instant the mapping bills; zero: every
	// period before the key's next mapping.
	ValidFrom time.Time
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

// SetStripeCustomer maps key to customer for every period, replacing
// every earlier mapping of the key. Events already sent keep the customer
// they named, and so do their corrections; periods not sent yet go to
// customer. To move a key to another customer from an instant on, keeping
// the periods before it with the old one, use SetStripeCustomerFrom.
func SetStripeCustomer(ctx context.Context, db Execer, key, customer string) error {
	return SetStripeCustomerFrom(ctx, db, key, customer, time.Time{})
}

// SetStripeCustomerFrom maps key to customer from the instant from on
// (zero: every period, replacing the key's mappings): a period is billed
// to the customer mapped at its last instant, a correction to the
// customer its period's first event named. The mapping keeps the key's
// current billing cycle anchor (SetStripeAnchor).
func SetStripeCustomerFrom(ctx context.Context, db Execer, key, customer string, from time.Time) error {
	if key == "" {
		return errors.New("sink: empty key")
	}
	if !customerID.MatchString(customer) {
		return ErrBadCustomer
	}
	var validFrom any = "-infinity"
	if !from.IsZero() {
		validFrom = from
	}
	_, err := db.Exec(ctx, `WITH cur AS (SELECT anchor_day, time_zone FROM stripe_customers WHERE key = $1),
gone AS (DELETE FROM stripe_customer_mappings WHERE key = $1 AND $3::timestamptz = '-infinity'),
m AS (
    INSERT INTO stripe_customer_mappings (key, valid_from, stripe_customer_id, anchor_day, time_zone)
    VALUES ($1, $3, $2, (SELECT anchor_day FROM cur), (SELECT time_zone FROM cur))
    ON CONFLICT (key, valid_from) DO UPDATE SET stripe_customer_id = EXCLUDED.stripe_customer_id)
INSERT INTO stripe_customers (key, stripe_customer_id) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET stripe_customer_id = CASE
        WHEN $3::timestamptz >= coalesce((SELECT max(valid_from) FROM stripe_customer_mappings WHERE key = $1), '-infinity')
        THEN EXCLUDED.stripe_customer_id ELSE stripe_customers.stripe_customer_id END,
    updated_at = now()`, key, customer, validFrom)
	if err != nil {
		return fmt.Errorf("sink: set stripe customer: %w", err)
	}
	return nil
}

// SetStripeAnchor sets the billing cycle anchor of key's customer (the
// zero Anchor: the UTC calendar month); the key must be mapped already
// (SetStripeCustomer). It decides which invoice a meter event sent from
// then on is stamped for (Stripe.Frame); it applies to the key's latest
// mapping.
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
	tag, err := db.Exec(ctx, `WITH latest AS (
    UPDATE stripe_customer_mappings SET anchor_day = $2, time_zone = $3
    WHERE key = $1 AND valid_from = (SELECT max(valid_from) FROM stripe_customer_mappings WHERE key = $1))
UPDATE stripe_customers SET anchor_day = $2, time_zone = $3, updated_at = now() WHERE key = $1`,
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

// StripeCustomerMappings returns every dated mapping, by key and
// ValidFrom.
func StripeCustomerMappings(ctx context.Context, db Querier) ([]StripeCustomer, error) {
	rows, err := db.Query(ctx, `SELECT key, stripe_customer_id, coalesce(anchor_day, 0), coalesce(time_zone, ''),
    CASE WHEN valid_from = '-infinity' THEN NULL ELSE valid_from END, created_at
FROM stripe_customer_mappings ORDER BY key, valid_from`)
	if err != nil {
		return nil, fmt.Errorf("sink: stripe customer mappings: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StripeCustomer, error) {
		var c StripeCustomer
		var zone string
		var from *time.Time
		if err := r.Scan(&c.Key, &c.CustomerID, &c.AnchorDay, &zone, &from, &c.UpdatedAt); err != nil {
			return c, err
		}
		c.UpdatedAt = c.UpdatedAt.UTC()
		if from != nil {
			c.ValidFrom = from.UTC()
		}
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
		return nil, fmt.Errorf("sink: stripe customer mappings: %w", err)
	}
	return out, nil
}

// customerBook holds each key's mappings, oldest first.
type customerBook map[string][]StripeCustomer

func newCustomerBook(cs []StripeCustomer) customerBook {
	b := make(customerBook)
	for _, c := range cs {
		b[c.Key] = append(b[c.Key], c)
	}
	for _, m := range b {
		slices.SortStableFunc(m, func(x, y StripeCustomer) int { return x.ValidFrom.Compare(y.ValidFrom) })
	}
	return b
}

// at returns key's mapping in force at t.
func (b customerBook) at(key string, t time.Time) (StripeCustomer, bool) {
	m := b[key]
	for i := len(m) - 1; i >= 0; i-- {
		if !m[i].ValidFrom.After(t) {
			return m[i], true
		}
	}
	return StripeCustomer{}, false
}

// named returns key's latest mapping to customer: the one whose billing
// cycle a correction of a period first billed to customer follows. A
// customer no longer mapped is billed on the UTC month.
func (b customerBook) named(key, customer string) StripeCustomer {
	m := b[key]
	for i := len(m) - 1; i >= 0; i-- {
		if m[i].CustomerID == customer {
			return m[i]
		}
	}
	return StripeCustomer{Key: key, CustomerID: customer}
}
