package billing

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// Querier answers usage queries; *Ledger is one.
type Querier interface {
	Usage(ctx context.Context, q Query) (Result, error)
}

// Handler serves GET /v1/usage?key=K&from=T1&to=T2&granularity=hour|day|window
// to the holders of a bearer token, through Reads. from and to are RFC 3339. The answer is
// JSON, or CSV when the request's Accept header prefers text/csv. Refusals
// have a JSON body {"error": "...", "field": "..."}, field when one is to
// blame:
//
//	503 no token is configured (Access nil or empty): the API is disabled, never open
//	401 no "Authorization: Bearer <token>" header (with WWW-Authenticate: Bearer)
//	403 a token that is not configured (field Authorization), or a
//	    prefix-scoped token asking for a key outside its prefix (field key)
//	400 bad parameters, or a range over the row limit (field from, to, granularity or key)
//	503 the ledger is unreachable or the query exceeded its statement timeout
//
// A Handler is safe for concurrent use.
type Handler struct {
	Ledger Querier
	// Access says which tokens may read which keys.
	Access *Access
	Logger *slog.Logger // nil discards
}

// ParseQuery reads a Query from URL parameters.
func ParseQuery(get func(string) string) (Query, error) {
	return parseQuery(NewParams(get))
}

func parseQuery(p *Params) (Query, error) {
	q := Query{Key: p.Get("key")}
	q.From = Param(p, "from", parseTime)
	q.To = Param(p, "to", parseTime)
	q.Granularity = Param(p, "granularity", ParseGranularity)
	if err := p.Err(); err != nil {
		return q, err
	}
	return q, q.Validate()
}

// parseTime parses an RFC 3339 time; "" is the zero time, which Validate
// names when it is required.
func parseTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, errors.New("not an RFC 3339 time: " + v)
	}
	return t, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	Reads{Access: h.Access, Logger: h.Logger}.Serve(w, r, func(p *Params, _ Scope) (Read, error) {
		q, err := parseQuery(p)
		var res Result
		return Read{
			Key: q.Key, What: "usage", OnTimeout: "query a shorter range, or retry later",
			Run:     func(ctx context.Context) (err error) { res, err = h.Ledger.Usage(ctx, q); return err },
			Formats: jsonOrCSV(func(w io.Writer) error { return WriteJSON(w, res) }, func(w io.Writer) error { return WriteCSV(w, res) }),
		}, err
	})
}

// jsonOrCSV are the formats of a billing read: JSON, or CSV when the
// Accept header prefers text/csv.
func jsonOrCSV(writeJSON, writeCSV func(io.Writer) error) []Format {
	return []Format{
		{MediaTypes: []string{"application/json", "*/*", "application/*"}, ContentType: "application/json",
			Write: func(_ context.Context, w http.ResponseWriter) error { return writeJSON(w) }},
		{MediaTypes: []string{"text/csv"}, ContentType: "text/csv; charset=utf-8",
			Write: func(_ context.Context, w http.ResponseWriter) error { return writeCSV(w) }},
	}
}
