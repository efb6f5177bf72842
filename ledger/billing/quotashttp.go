package billing

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// QuotaQuerier answers quota queries; *Ledger is one.
type QuotaQuerier interface {
	Quotas(ctx context.Context, q QuotaQuery) (QuotaResult, error)
}

// QuotaHandler serves GET /v1/usage/quotas?key=K[&at=T] to the holders of
// a bearer token, with Handler's authorization and key-prefix scoping: the
// key's plan and, for each of its quotas, the period that holds at (RFC
// 3339; default now) on the plan's calendar, with limit, used and
// remaining. The answer is JSON (QuotaResult), or CSV when the request's
// Accept header prefers text/csv. A key with no plan, or a plan without
// quotas, answers an empty quota list (with the plan's name, "" for none).
// Refusals are Handler's: 503 disabled, 401 no token, 403 wrong token or
// a key outside the token's prefix (field key), 400 naming key or at, 503
// when the ledger is unreachable or the query timed out.
//
// A QuotaHandler is safe for concurrent use.
type QuotaHandler struct {
	Ledger QuotaQuerier
	// Access says which tokens may read which keys.
	Access *Access
	Logger *slog.Logger // nil discards
	// Now is the instant a request without at asks about. Default
	// time.Now.
	Now func() time.Time
}

// ParseQuotaQuery reads a QuotaQuery from URL parameters; at is now when
// absent.
func ParseQuotaQuery(get func(string) string, now time.Time) (QuotaQuery, error) {
	return parseQuotaQuery(NewParams(get), now)
}

func parseQuotaQuery(p *Params, now time.Time) (QuotaQuery, error) {
	q := QuotaQuery{Key: p.Get("key")}
	q.At = Param(p, "at", func(v string) (time.Time, error) {
		if v == "" {
			return now, nil
		}
		return parseTime(v)
	})
	if err := p.Err(); err != nil {
		return q, err
	}
	return q, q.Validate()
}

func (h *QuotaHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	Reads{Access: h.Access, Logger: h.Logger}.Serve(w, r, func(p *Params, _ Scope) (Read, error) {
		q, err := parseQuotaQuery(p, now())
		var res QuotaResult
		return Read{
			Key: q.Key, What: "quota", OnTimeout: "retry later",
			Run:     func(ctx context.Context) (err error) { res, err = h.Ledger.Quotas(ctx, q); return err },
			Formats: jsonOrCSV(func(w io.Writer) error { return WriteQuotasJSON(w, res) }, func(w io.Writer) error { return WriteQuotasCSV(w, res) }),
		}, err
	})
}
