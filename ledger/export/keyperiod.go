package export

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// keyPeriodSQL is the period of unit $2 that holds instant $3 on the
// calendar of key $1's plan (UTC without one): the bounds planPageSQL
// cuts the key's rows by.
const keyPeriodSQL = `SELECT b.period_start, b.period_end
FROM quota_key_plan($1) kp
CROSS JOIN LATERAL quota_period_bounds($2, kp.time_zone, kp.anchor_day, $3) b`

// KeyPeriod returns the period [start, end) of granularity g that holds
// instant at for key, as an export on calendar cal cuts it: the row of
// the key that holds at has these bounds. On CalendarUTC it reads
// nothing; on CalendarPlan it reads the key's plan from the ledger's
// mirror, under the statement timeout. Its errors are *FieldError for a
// bad argument, or wrap ErrTimeout.
func (e *Exporter) KeyPeriod(ctx context.Context, key string, g Granularity, cal Calendar, at time.Time) (start, end time.Time, err error) {
	g, gerr := ParseGranularity(string(g))
	cal, cerr := ParseCalendar(string(cal))
	switch {
	case gerr != nil:
		return start, end, &FieldError{Field: "granularity", Err: gerr}
	case cerr != nil:
		return start, end, &FieldError{Field: "calendar", Err: cerr}
	case key == "" || len(key) > store.MaxKeyLen:
		return start, end, &FieldError{Field: "key", Err: fmt.Errorf("must be 1 to %d bytes", store.MaxKeyLen)}
	case at.IsZero():
		return start, end, &FieldError{Field: "at", Err: errors.New("required")}
	}
	if cal == CalendarUTC {
		start = g.Start(at)
		return start, g.Next(start), nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout)
	defer cancel()
	rows, err := e.db.Query(ctx, keyPeriodSQL, key, string(g), at)
	if err != nil {
		return start, end, wrapErr(err, e.cfg.StatementTimeout)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return start, end, wrapErr(err, e.cfg.StatementTimeout)
		}
		return start, end, errors.New("export: quota_period_bounds answered no row")
	}
	if err := rows.Scan(&start, &end); err != nil {
		return start, end, fmt.Errorf("export: scan: %w", err)
	}
	return start.UTC(), end.UTC(), nil
}
