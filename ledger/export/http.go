package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/quotaplatform/quota/ledger/billing"
)

// Handler serves GET /v1/usage/export?from=&to=&granularity=hour|day|month
// [&calendar=utc|plan][&format=csv|ndjson][&after=KEY | &cursor=C] to the
// holders of a billing token: every key's usage per period that starts in
// [from, to), ordered by key, as the Encoder writes it. A prefix-scoped
// token exports only its keys. from and to are RFC 3339 times, dates
// (2026-11-01) or months (2026-11), read as UTC instants: on the UTC
// calendar (the default) each the start of a UTC period; with
// calendar=plan (CalendarPlan: each key's periods on its plan's zone and
// anchor day) any instants. The format is format=, else the Accept
// header (text/csv, else NDJSON). Refusals come before the first row, as
// GET /v1/usage's (billing.Handler) do: 503 disabled, 401 no token, 403
// wrong token, 400 naming the field. Once rows flow the status is 200, and
// a failure ends the body with the Encoder's error line.
//
// The export streams page by page (Exporter): each page's query runs
// under the statement timeout, and the response's write deadline is moved
// WriteTimeout past each page, so neither cuts a long export.
type Handler struct {
	Exporter *Exporter
	Access   *billing.Access
	// WriteTimeout is the longest write of one page to the client.
	// Zero means 30s.
	WriteTimeout time.Duration
	// Now returns the current time; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger // nil discards
}

// ParseTime reads a period start: RFC 3339, a date (2006-01-02) or a
// month (2006-01), all UTC.
func ParseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, time.DateOnly, "2006-01"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errors.New("not an RFC 3339 time, a date (2006-01-02) or a month (2006-01): " + s)
}

// ParseQuery reads a Query from URL parameters; now is Query.Now. Its
// errors are *FieldError.
func ParseQuery(get func(string) string, now time.Time) (Query, error) {
	q := Query{After: get("after"), Now: now}
	g, err := ParseGranularity(get("granularity"))
	if err != nil {
		return q, &FieldError{Field: "granularity", Err: err}
	}
	q.Granularity = g
	if q.Calendar, err = ParseCalendar(get("calendar")); err != nil {
		return q, &FieldError{Field: "calendar", Err: err}
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		if v := get(f.name); v != "" {
			t, err := ParseTime(v)
			if err != nil {
				return q, &FieldError{Field: f.name, Err: err}
			}
			*f.dst = t
		}
	}
	if q.Cursor, err = ParseCursor(get("cursor")); err != nil {
		return q, &FieldError{Field: "cursor", Err: err}
	}
	return q, q.Validate()
}

// negotiate picks the format from format= or the Accept header.
func negotiate(param, accept string) (Format, error) {
	if param != "" {
		f, err := ParseFormat(param)
		if err != nil {
			return "", &FieldError{Field: "format", Err: err}
		}
		return f, nil
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" {
			continue
		}
		switch mt {
		case "text/csv":
			return CSV, nil
		case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/json", "*/*":
			return NDJSON, nil
		}
	}
	return NDJSON, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed", "")
		return
	}
	scope, ok := h.authorize(w, r)
	if !ok {
		return
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	params := r.URL.Query()
	q, err := ParseQuery(params.Get, now())
	if err == nil {
		q.Prefix = scope.Prefix
	}
	format, ferr := negotiate(params.Get("format"), r.Header.Get("Accept"))
	if err == nil {
		err = ferr
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, fe.Error(), fe.Field)
		return
	} else if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	w.Header().Set("Content-Type", format.ContentType())
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	h.stream(r.Context(), w, q, format)
}

// stream writes the export, moving the write deadline past each page.
func (h *Handler) stream(ctx context.Context, w http.ResponseWriter, q Query, format Format) {
	rc := http.NewResponseController(w)
	timeout := h.WriteTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	_ = rc.SetWriteDeadline(time.Now().Add(timeout)) // unsupported by some writers: keep the server's
	enc := NewEncoder(w, format, q.Granularity)
	err := h.Exporter.Export(ctx, q, func(rows []Row) error {
		_ = rc.SetWriteDeadline(time.Now().Add(timeout))
		if err := enc.Rows(rows); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err == nil {
		_ = enc.End()
		return
	}
	if ctx.Err() != nil {
		return // the client left
	}
	h.log().Error("billing: export stopped", "err", err, "rows", enc.Count())
	msg := "ledger unavailable: resume from the cursor"
	if errors.Is(err, ErrTimeout) {
		msg = "a page of the export exceeded the statement timeout: resume from the cursor, or retry later"
	}
	_ = enc.Fail(msg)
}

func (h *Handler) log() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}

// authorize answers 503, 401 or 403 as billing.Handler does, or returns
// the token's scope.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) (billing.Scope, bool) {
	scope, err := h.Access.Authorize(r.Header.Get("Authorization"))
	switch {
	case errors.Is(err, billing.ErrDisabled):
		writeError(w, http.StatusServiceUnavailable, "billing API disabled: set --billing-token", "")
	case errors.Is(err, billing.ErrNoToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="quota-billing"`)
		writeError(w, http.StatusUnauthorized, "this API needs an Authorization: Bearer <billing token> header", "Authorization")
	case err != nil:
		writeError(w, http.StatusForbidden, "wrong billing token", "Authorization")
	default:
		return scope, true
	}
	return billing.Scope{}, false
}

func writeError(w http.ResponseWriter, status int, msg, field string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := map[string]string{"error": msg}
	if field != "" {
		body["field"] = field
	}
	_ = json.NewEncoder(w).Encode(body)
}

// String is for logs: the query without its keys.
func (q Query) String() string {
	cal := q.Calendar
	if cal == "" {
		cal = CalendarUTC
	}
	return fmt.Sprintf("%s %s [%s, %s)", cal, q.Granularity, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
}
