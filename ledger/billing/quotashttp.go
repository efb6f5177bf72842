package billing

import (
	"context"
	"errors"
	"fmt"
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
	q := QuotaQuery{Key: get("key"), At: now}
	if v := get("at"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return q, &FieldError{"at", errors.New("not an RFC 3339 time: " + v)}
		}
		q.At = t
	}
	return q, q.Validate()
}

func (h *QuotaHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed", "")
		return
	}
	base := Handler{Access: h.Access, Logger: h.Logger}
	scope, ok := base.authorize(w, r)
	if !ok {
		return
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	q, err := ParseQuotaQuery(r.URL.Query().Get, now())
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	if !scope.Allows(q.Key) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("this token may read only keys that start with %q", scope.Prefix), "key")
		return
	}
	res, err := h.Ledger.Quotas(r.Context(), q)
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		writeBadRequest(w, err)
		return
	case errors.Is(err, ErrTimeout):
		base.logError("billing: quota query timed out", err)
		writeError(w, http.StatusServiceUnavailable, "the quota query exceeded the statement timeout: retry later", "")
		return
	case err != nil:
		base.logError("billing: quota query failed", err)
		writeError(w, http.StatusServiceUnavailable, "ledger unavailable", "")
		return
	}
	if wantsCSV(r.Header.Get("Accept")) {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		_ = WriteQuotasCSV(w, res)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = WriteQuotasJSON(w, res)
}
