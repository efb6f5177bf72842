package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
// header (text/csv, else NDJSON). It is served through billing.Reads, the
// path of GET /v1/usage too, so refusals are theirs and come before the
// first row: 503 disabled, 401 no token, 403 wrong token, 400 naming the
// field. Once rows flow the status is 200, and
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
	return parseQuery(billing.NewParams(get), now)
}

func parseQuery(p *billing.Params, now time.Time) (Query, error) {
	q := Query{After: p.Get("after"), Now: now}
	q.Granularity = billing.Param(p, "granularity", ParseGranularity)
	q.Calendar = billing.Param(p, "calendar", ParseCalendar)
	q.From = billing.Param(p, "from", parseOptionalTime)
	q.To = billing.Param(p, "to", parseOptionalTime)
	q.Cursor = billing.Param(p, "cursor", ParseCursor)
	if err := p.Err(); err != nil {
		return q, err
	}
	return q, q.Validate()
}

// parseOptionalTime is ParseTime, with "" the zero time, which Validate
// names when it is required.
func parseOptionalTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	return ParseTime(v)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	billing.Reads{Access: h.Access, Logger: h.Logger}.Serve(w, r, func(p *billing.Params, scope billing.Scope) (billing.Read, error) {
		q, err := parseQuery(p, now())
		q.Prefix = scope.Prefix
		streamAs := func(f Format) func(context.Context, http.ResponseWriter) error {
			return func(ctx context.Context, w http.ResponseWriter) error {
				h.stream(ctx, w, q, f)
				return nil
			}
		}
		return billing.Read{
			Formats: []billing.Format{
				{Name: string(NDJSON), ContentType: NDJSON.ContentType(), Write: streamAs(NDJSON),
					MediaTypes: []string{"application/x-ndjson", "application/ndjson", "application/jsonl", "application/json", "*/*"}},
				{Name: string(CSV), ContentType: CSV.ContentType(), Write: streamAs(CSV), MediaTypes: []string{"text/csv"}},
			},
			CacheControl: "no-store",
		}, err
	}) // Run is nil: the export runs as it streams, after the status
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

// String is for logs: the query without its keys.
func (q Query) String() string {
	cal := q.Calendar
	if cal == "" {
		cal = CalendarUTC
	}
	return fmt.Sprintf("%s %s [%s, %s)", cal, q.Granularity, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
}
