package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditEntry is one row of a period's audit trail (billing_sink_audit,
// migration 020): a request recorded before it was sent, an attempt sent
// again, the sink's answer, a new frame, a hold for a person, or a
// settlement decided without an attempt. Cost units.
type AuditEntry struct {
	ID          int64           `json:"id"` // the trail's order
	At          time.Time       `json:"at"`
	Sink        string          `json:"sink"`
	Key         string          `json:"key"`
	PeriodStart time.Time       `json:"period_start"`
	PeriodEnd   time.Time       `json:"period_end"`
	Granularity string          `json:"granularity"`
	Revision    int             `json:"revision"`
	EventID     string          `json:"event_id"`
	Action      string          `json:"action"` // request, resend, answer, restamp, held, settle
	Status      string          `json:"status"` // the event's status after it: pending, sent, failed, held
	Billed      int64           `json:"billed"` // the event's billed figure
	Acked       int64           `json:"acked"`  // what the sink holds for the period after it
	Attempts    int             `json:"attempts"`
	StatusCode  int             `json:"status_code"`     // a refusal's HTTP status when its answer names one; 0 otherwise
	Answer      string          `json:"answer"`          // a refusal's answer, trimmed to 2000 characters
	Decision    string          `json:"decision"`        // settle: delivered or missing
	Data        json.RawMessage `json:"data,omitempty"`  // request: the event's data
	Frame       json.RawMessage `json:"frame,omitempty"` // request, resend, restamp: the sink request (Stripe: customer, value, timestamp, identifier)
}

// AuditQuery selects a trail: Key's periods that start in [From, To) of
// Sink ("" every sink).
type AuditQuery struct {
	Key      string
	From, To time.Time
	Sink     string
}

// rowsQuerier is the part of a pgx pool or connection that Audit reads
// with.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Audit returns q's audit trail in the order it was written: every
// revision, attempt, answer and decision, including those that later rows
// of billing_sink_events replaced.
func Audit(ctx context.Context, db rowsQuerier, q AuditQuery) ([]AuditEntry, error) {
	if q.Key == "" {
		return nil, errors.New("sink: audit: key is required")
	}
	if !q.From.Before(q.To) {
		return nil, fmt.Errorf("sink: audit: from %v must be before to %v", q.From, q.To)
	}
	rows, err := db.Query(ctx, `SELECT id, at, sink, key, period_start, period_end, granularity, revision, event_id, action,
    status, billed, acked, attempts, coalesce(status_code, 0), coalesce(answer, ''), coalesce(decision, ''), data, frame
FROM billing_sink_audit
WHERE key = $1 AND period_start >= $2 AND period_start < $3 AND ($4 = '' OR sink = $4)
ORDER BY id`, q.Key, q.From, q.To, q.Sink)
	if err != nil {
		return nil, fmt.Errorf("sink: audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.ID, &e.At, &e.Sink, &e.Key, &e.PeriodStart, &e.PeriodEnd, &e.Granularity, &e.Revision, &e.EventID,
			&e.Action, &e.Status, &e.Billed, &e.Acked, &e.Attempts, &e.StatusCode, &e.Answer, &e.Decision, &e.Data, &e.Frame)
		e.At, e.PeriodStart, e.PeriodEnd = e.At.UTC(), e.PeriodStart.UTC(), e.PeriodEnd.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("sink: audit: %w", err)
	}
	return out, nil
}
