package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Querier answers usage queries; *Ledger is one.
type Querier interface {
	Usage(ctx context.Context, q Query) (Result, error)
}

// Handler serves GET /v1/usage?key=K&from=T1&to=T2&granularity=hour|day|window
// to the holders of a bearer token. from and to are RFC 3339. The answer is
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
	q := Query{Key: get("key")}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		v := get(f.name)
		if v == "" {
			continue // Validate names it
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return q, &FieldError{f.name, errors.New("not an RFC 3339 time: " + v)}
		}
		*f.dst = t
	}
	g, err := ParseGranularity(get("granularity"))
	if err != nil {
		return q, &FieldError{"granularity", err}
	}
	q.Granularity = g
	return q, q.Validate()
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var res Result
	h.serveRead(w, r, "usage", "query a shorter range, or retry later",
		func() (string, func(context.Context) error, error) {
			q, err := ParseQuery(r.URL.Query().Get)
			return q.Key, func(ctx context.Context) (err error) { res, err = h.Ledger.Usage(ctx, q); return err }, err
		},
		func(w io.Writer) error { return WriteCSV(w, res) },
		func(w io.Writer) error { return WriteJSON(w, res) })
}

// serveRead is what every billing read shares: GET or HEAD only, the
// bearer token, the request parsed (parse returns the key asked for and
// the query to run, or the error naming a bad parameter), the key inside
// the token's prefix, the query run (400 naming a bad field, 503 on a
// timeout or an unreachable ledger, logged as the what query's failure),
// and the answer as CSV when Accept prefers it, else JSON.
func (h *Handler) serveRead(w http.ResponseWriter, r *http.Request, what, onTimeout string,
	parse func() (string, func(context.Context) error, error), writeCSV, writeJSON func(io.Writer) error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed", "")
		return
	}
	scope, ok := h.authorize(w, r)
	if !ok {
		return
	}
	key, run, err := parse()
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	if !scope.Allows(key) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("this token may read only keys that start with %q", scope.Prefix), "key")
		return
	}
	err = run(r.Context())
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		writeBadRequest(w, err)
		return
	case errors.Is(err, ErrOverflow):
		h.logError("billing: "+what+" query passed the overflow guard", err)
		writeError(w, http.StatusUnprocessableEntity, ErrOverflow.Error(), "")
		return
	case errors.Is(err, ErrTimeout):
		h.logError("billing: "+what+" query timed out", err)
		writeError(w, http.StatusServiceUnavailable, "the "+what+" query exceeded the statement timeout: "+onTimeout, "")
		return
	case err != nil:
		h.logError("billing: "+what+" query failed", err)
		writeError(w, http.StatusServiceUnavailable, "ledger unavailable", "")
		return
	}
	if wantsCSV(r.Header.Get("Accept")) {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		_ = writeCSV(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = writeJSON(w)
}

// authorize returns the scope of r's bearer token, or answers 503, 401 or
// 403 and returns false.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) (Scope, bool) {
	scope, err := h.Access.Authorize(r.Header.Get("Authorization"))
	switch {
	case errors.Is(err, ErrDisabled):
		writeError(w, http.StatusServiceUnavailable, "billing API disabled: set --billing-token", "")
	case errors.Is(err, ErrNoToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="quota-billing"`)
		writeError(w, http.StatusUnauthorized, "this API needs an Authorization: Bearer <billing token> header", "Authorization")
	case err != nil:
		writeError(w, http.StatusForbidden, "wrong billing token", "Authorization")
	default:
		return scope, true
	}
	return Scope{}, false
}

func (h *Handler) logError(msg string, err error) {
	if h.Logger != nil {
		h.Logger.Error(msg, "err", err)
	}
}

// writeBadRequest answers 400 naming the field of a *FieldError.
func writeBadRequest(w http.ResponseWriter, err error) {
	var fe *FieldError
	if errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, fe.Error(), fe.Field)
		return
	}
	writeError(w, http.StatusBadRequest, err.Error(), "")
}

// wantsCSV reports whether text/csv is the first acceptable type named.
func wantsCSV(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" {
			continue
		}
		switch mt {
		case "text/csv":
			return true
		case "application/json", "*/*", "application/*":
			return false
		}
	}
	return false
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
