package billing

import (
	"context"
	"encoding/json"
	"errors"
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

// Handler serves GET /v1/usage?key=K&from=T1&to=T2&granularity=hour|day|window.
// from and to are RFC 3339. The answer is JSON, or CSV when the request's
// Accept header prefers text/csv. Bad parameters get 400 with a JSON body
// {"error": "...", "field": "..."}.
type Handler struct {
	Ledger Querier
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
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed", "")
		return
	}
	q, err := ParseQuery(r.URL.Query().Get)
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			writeError(w, http.StatusBadRequest, fe.Error(), fe.Field)
			return
		}
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	res, err := h.Ledger.Usage(r.Context(), q)
	if err != nil {
		if h.Logger != nil {
			h.Logger.Error("billing: usage query failed", "err", err)
		}
		writeError(w, http.StatusServiceUnavailable, "ledger unavailable", "")
		return
	}
	if wantsCSV(r.Header.Get("Accept")) {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		_ = WriteCSV(w, res)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = WriteJSON(w, res)
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
