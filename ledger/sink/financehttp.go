package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
)

// AuditHandler serves GET /v1/usage/audit?key=K&period=2026-11[&sink=S]
// to the holders of a billing token (billing.Reads: a prefix-scoped token
// reads only its keys): the key's audit trail (Audit) for the periods
// that start in the UTC month, as a JSON array.
type AuditHandler struct {
	DB     rowsQuerier
	Access *billing.Access
	Logger *slog.Logger // nil discards
}

func (h *AuditHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	billing.Reads{Access: h.Access, Logger: h.Logger}.Serve(w, r, func(p *billing.Params, _ billing.Scope) (billing.Read, error) {
		q := AuditQuery{Key: billing.Param(p, "key", required), Sink: p.Get("sink")}
		q.From = billing.Param(p, "period", parseMonth)
		q.To = q.From.AddDate(0, 1, 0)
		var trail []AuditEntry
		return billing.Read{Key: q.Key, What: "audit", OnTimeout: "retry later",
			Run: func(ctx context.Context) (err error) {
				trail, err = Audit(ctx, h.DB, q)
				return err
			},
			Formats: []billing.Format{jsonFormat(func() any { return trail })}, CacheControl: "no-store"}, p.Err()
	})
}

// StatementHandler serves GET /v1/usage/statement?customer=cus_…&period=2026-11
// to the holders of a billing token for every key (a statement spans a
// customer's keys, so a prefix-scoped token is refused, field customer):
// the customer's Statement for the UTC month, as JSON.
type StatementHandler struct {
	DB       Querier
	Exporter *export.Exporter
	Access   *billing.Access
	Now      func() time.Time // nil: time.Now
	Logger   *slog.Logger     // nil discards
}

func (h *StatementHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	billing.Reads{Access: h.Access, Logger: h.Logger}.Serve(w, r, func(p *billing.Params, scope billing.Scope) (billing.Read, error) {
		customer := billing.Param(p, "customer", func(v string) (string, error) {
			if !customerID.MatchString(v) {
				return "", ErrBadCustomer
			}
			if scope.Prefix != "" {
				return "", errors.New("a statement spans the customer's keys: it needs a token for every key")
			}
			return v, nil
		})
		from := billing.Param(p, "period", parseMonth)
		var st Statement
		return billing.Read{What: "statement", OnTimeout: "retry later",
			Run: func(ctx context.Context) (err error) {
				st, err = CustomerStatement(ctx, h.DB, h.Exporter, customer, from, from.AddDate(0, 1, 0), now())
				return err
			},
			Formats: []billing.Format{jsonFormat(func() any { return st })}, CacheControl: "no-store"}, p.Err()
	})
}

func required(v string) (string, error) {
	if v == "" {
		return "", errors.New("required")
	}
	return v, nil
}

// parseMonth reads a UTC month, 2026-11.
func parseMonth(v string) (time.Time, error) {
	t, err := time.Parse("2006-01", v)
	if err != nil {
		return t, fmt.Errorf("want a month like 2026-11, got %q", v)
	}
	return t, nil
}

// jsonFormat writes what answer returns, once the read ran, as JSON.
func jsonFormat(answer func() any) billing.Format {
	return billing.Format{Name: "json", ContentType: "application/json", MediaTypes: []string{"application/json", "*/*"},
		Write: func(_ context.Context, w http.ResponseWriter) error { return json.NewEncoder(w).Encode(answer()) }}
}
