package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quotaplatform/quota/ledger/export"
)

// StatementLine is one key's UTC month on a customer's statement: the
// export's figures of that period. Cost units.
type StatementLine struct {
	Key         string    `json:"key"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	Allowed     int64     `json:"allowed"`
	Charged     int64     `json:"charged"`
	Refunded    int64     `json:"refunded"`
	Net         int64     `json:"net"`
	Billed      int64     `json:"billed"`
	Complete    bool      `json:"complete"`
}

// StatementTotal sums a statement's lines.
type StatementTotal struct {
	Allowed  int64 `json:"allowed"`
	Charged  int64 `json:"charged"`
	Refunded int64 `json:"refunded"`
	Net      int64 `json:"net"`
	Billed   int64 `json:"billed"`
}

// Statement rolls a Stripe customer's keys up for the UTC months in
// [From, To).
type Statement struct {
	Customer string          `json:"customer"`
	From     time.Time       `json:"from"`
	To       time.Time       `json:"to"`
	Lines    []StatementLine `json:"lines"`
	Total    StatementTotal  `json:"total"`
}

// CustomerStatement returns customer's statement for the UTC months in
// [from, to): each key's month billed to customer, by the dated mappings
// (stripe_customer_mappings), that is the customer mapped at the month's
// last instant, as a Stripe sink bills it; a key moved to another customer
// stays on this one's statement for the months before the move. The
// figures are the export's (ex) at now.
func CustomerStatement(ctx context.Context, db Querier, ex *export.Exporter, customer string, from, to, now time.Time) (
	Statement, error) {
	st := Statement{Customer: customer, From: from, To: to, Lines: []StatementLine{}}
	if !customerID.MatchString(customer) {
		return st, fmt.Errorf("customer: %w", ErrBadCustomer)
	}
	if !from.Before(to) || !export.Month.Start(from).Equal(from) || !export.Month.Start(to).Equal(to) {
		return st, errors.New("sink: statement: from and to must be UTC month starts, from before to")
	}
	mappings, err := StripeCustomerMappings(ctx, db)
	if err != nil {
		return st, err
	}
	book := newCustomerBook(mappings)
	var keys []string
	for _, m := range mappings {
		if m.CustomerID == customer && !slices.Contains(keys, m.Key) {
			keys = append(keys, m.Key)
		}
	}
	if len(keys) == 0 {
		return st, nil
	}
	q := export.Query{From: from, To: to, Granularity: export.Month, Calendar: export.CalendarUTC, Now: now, Keys: keys}
	err = exportSpans(ctx, ex, q, func(rows []export.Row) error {
		for _, r := range rows {
			if c, ok := book.at(r.Key, r.PeriodEnd.Add(-time.Second)); !ok || c.CustomerID != customer {
				continue
			}
			st.Lines = append(st.Lines, StatementLine{Key: r.Key, PeriodStart: r.PeriodStart.UTC(), PeriodEnd: r.PeriodEnd.UTC(),
				Allowed: r.Allowed, Charged: r.Charged, Refunded: r.Refunded, Net: r.Net, Billed: r.Billed, Complete: r.Complete})
			t := &st.Total
			t.Allowed, t.Charged, t.Refunded, t.Net, t.Billed = t.Allowed+r.Allowed, t.Charged+r.Charged,
				t.Refunded+r.Refunded, t.Net+r.Net, t.Billed+r.Billed
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("sink: statement: %w", err)
	}
	return st, nil
}
