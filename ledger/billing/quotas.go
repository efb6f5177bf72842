package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/store"
)

// QuotaQuery asks for one key's quotas in the periods that hold At.
type QuotaQuery struct {
	Key string
	At  time.Time
}

// Validate checks the query; its errors are *FieldError.
func (q *QuotaQuery) Validate() error {
	switch {
	case q.Key == "":
		return &FieldError{"key", errors.New("required")}
	case len(q.Key) > store.MaxKeyLen:
		return &FieldError{"key", fmt.Errorf("longer than %d bytes", store.MaxKeyLen)}
	case q.At.IsZero():
		return &FieldError{"at", errors.New("required (RFC 3339)")}
	}
	return nil
}

// QuotaUsage is one quota of a plan in one period: [Start, End) on the
// plan's calendar (docs/design.md [quotas]), its Limit, what was Used (the
// billed cost, allowed + charged − refunded, of the usage windows that
// start in the period: the sum quota bases are made of) and what Remains,
// max(0, Limit − Used). Cost units.
type QuotaUsage struct {
	Period    period.Unit `json:"period"`
	Start     time.Time   `json:"start"`
	End       time.Time   `json:"end"`
	Limit     int64       `json:"limit"`
	Used      int64       `json:"used"`
	Remaining int64       `json:"remaining"`
}

// QuotaResult answers a QuotaQuery: the key's plan as the catalogue
// resolves it (its assignment, else the plan "default"; "" when it has
// none), the plan's calendar, and a QuotaUsage per quota, shortest period
// first; none for a plan without quotas.
type QuotaResult struct {
	Key       string       `json:"key"`
	Plan      string       `json:"plan"`
	TimeZone  string       `json:"time_zone"`
	AnchorDay int          `json:"anchor_day"`
	At        time.Time    `json:"at"`
	Quotas    []QuotaUsage `json:"quotas"`
}

// quotaSQL reads a key's plan and its quotas' usage at an instant in one
// statement (one snapshot): $1 key, $2 at. migrations/008 defines the
// functions; each quota's sum is partition-pruned by its period's bounds.
const quotaSQL = `SELECT kp.plan, kp.time_zone, kp.anchor_day, u.period, u.period_start, u.period_end, u.quota_limit, u.used, u.remaining
FROM quota_key_plan($1) kp
LEFT JOIN LATERAL quota_usage($1, $2) u ON true
ORDER BY u.ord`

// Quotas answers q from the ledger (the catalogue's plans as the
// reconciler mirrors them, and usage_reports). A query that runs longer
// than the statement timeout wraps ErrTimeout.
func (l *Ledger) Quotas(ctx context.Context, q QuotaQuery) (QuotaResult, error) {
	if err := q.Validate(); err != nil {
		return QuotaResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StatementTimeout)
	defer cancel()
	res, err := l.quotas(ctx, q)
	if err != nil && isTimeout(err) {
		return QuotaResult{}, fmt.Errorf("%w (%v): %w", ErrTimeout, l.cfg.StatementTimeout, err)
	}
	return res, err
}

func (l *Ledger) quotas(ctx context.Context, q QuotaQuery) (QuotaResult, error) {
	res := QuotaResult{Key: q.Key, At: q.At.UTC(), Quotas: []QuotaUsage{}}
	rows, err := l.pool.Query(ctx, quotaSQL, q.Key, q.At)
	if err != nil {
		return QuotaResult{}, fmt.Errorf("billing: quota query: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			plan, unit  *string
			start, end  *time.Time
			limit, used *int64
			remaining   *int64
			anchor      int32
		)
		if err := rows.Scan(&plan, &res.TimeZone, &anchor, &unit, &start, &end, &limit, &used, &remaining); err != nil {
			return QuotaResult{}, fmt.Errorf("billing: quota scan: %w", err)
		}
		if plan != nil {
			res.Plan = *plan
		}
		res.AnchorDay = int(anchor)
		if unit == nil { // the plan has no quotas
			continue
		}
		res.Quotas = append(res.Quotas, QuotaUsage{Period: period.Unit(*unit), Start: start.UTC(), End: end.UTC(),
			Limit: *limit, Used: *used, Remaining: *remaining})
	}
	if err := rows.Err(); err != nil {
		return QuotaResult{}, fmt.Errorf("billing: quota query: %w", err)
	}
	return res, nil
}
