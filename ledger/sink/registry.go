package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quotaplatform/quota/ledger/export"
)

// ErrSinkChanged: a run asked a sink for another granularity, calendar or
// customer rule than the sink's first run recorded (billing_sinks,
// migration 014). Sending it would bill usage the sink already holds
// again, cut by other periods; the run sends nothing.
var ErrSinkChanged = errors.New("sink: this run differs from what the sink was first run with")

// Customer rules recorded in billing_sinks.customer_rule.
const (
	// CustomersByKey: the event's subject is the key; no mapping.
	CustomersByKey = "key"
	// CustomersDated: the customer mapped to the key at the period's last
	// instant (stripe_customer_mappings); a correction goes to the
	// customer its period's first event named.
	CustomersDated = "dated"
)

// registration is what a sink fixes on its first run.
type registration struct {
	granularity export.Granularity
	calendar    export.Calendar
	customers   string
}

// dbtx is the part of a pgx pool or connection the registry uses.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// register records want for sinkName if nothing is recorded yet, and
// refuses a run that differs from what is (ErrSinkChanged, naming each
// field). It returns the sink's watermark (zero: none yet).
func register(ctx context.Context, db dbtx, sinkName string, want registration) (lookedThrough time.Time, err error) {
	var g, cal, rule string
	var lt *time.Time
	err = db.QueryRow(ctx, `INSERT INTO billing_sinks AS s (sink, granularity, calendar, customer_rule) VALUES ($1, $2, $3, $4)
ON CONFLICT (sink) DO UPDATE SET granularity = coalesce(s.granularity, EXCLUDED.granularity),
    calendar = coalesce(s.calendar, EXCLUDED.calendar), customer_rule = coalesce(s.customer_rule, EXCLUDED.customer_rule),
    updated_at = now()
RETURNING granularity, calendar, customer_rule, looked_through`,
		sinkName, string(want.granularity), string(want.calendar), want.customers).Scan(&g, &cal, &rule, &lt)
	if err != nil {
		return time.Time{}, fmt.Errorf("sink %q: registry: %w", sinkName, err)
	}
	var diffs []string
	if g != string(want.granularity) {
		diffs = append(diffs, fmt.Sprintf("granularity: first run sent %s, this run asks %s", g, want.granularity))
	}
	if cal != string(want.calendar) {
		diffs = append(diffs, fmt.Sprintf("calendar: first run cut by %s, this run asks %s", cal, want.calendar))
	}
	if rule != want.customers {
		diffs = append(diffs, fmt.Sprintf("customer rule: first run used %s, this run asks %s", rule, want.customers))
	}
	if len(diffs) > 0 {
		return time.Time{}, fmt.Errorf("%w: sink %q: %s (another sink name, e.g. another meter, takes other settings)",
			ErrSinkChanged, sinkName, strings.Join(diffs, "; "))
	}
	if lt != nil {
		return lt.UTC(), nil
	}
	return time.Time{}, nil
}

// advance moves sinkName's watermark forward to t (never back).
func advance(ctx context.Context, db dbtx, sinkName string, t time.Time) error {
	_, err := db.Exec(ctx, `UPDATE billing_sinks SET looked_through = greatest(coalesce(looked_through, $2), $2), updated_at = now()
WHERE sink = $1`, sinkName, t)
	if err != nil {
		return fmt.Errorf("sink %q: record the watermark: %w", sinkName, err)
	}
	return nil
}
