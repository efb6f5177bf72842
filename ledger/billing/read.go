package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
)

// Reads is the one HTTP path of every billing read: GET /v1/usage
// (Handler), GET /v1/usage/quotas (QuotaHandler) and GET /v1/usage/export
// (package export). Serve checks the method (GET or HEAD, else 405) and the
// bearer token (503 disabled, 401 none, 403 wrong), has the endpoint parse
// the parameters (400 naming the field), refuses a key outside the token's
// prefix (403, field key), runs the query (400 naming a field, 422 past the
// overflow guard, 503 timed out or ledger unreachable) and writes the
// answer in the format negotiated from format= or the Accept header.
// Refusals have a JSON body {"error": "...", "field": "..."}, field when
// one is to blame. Reads is safe for concurrent use.
type Reads struct {
	// Access says which tokens may read which keys.
	Access *Access
	Logger *slog.Logger // nil discards
}

// A Read is one request's query, parsed by its endpoint.
type Read struct {
	// Key is the key asked for, refused outside the token's prefix; ""
	// when the query bounds itself by the token's Scope (an export).
	Key string
	// What names the query in logs and refusals ("usage"), and OnTimeout
	// ends the refusal of a query that timed out ("retry later").
	What, OnTimeout string
	// Run runs the query before anything is written, so that its failure
	// is a refusal. nil for a streamed answer, whose query runs as Format
	// writes it; a HEAD request then runs none.
	Run func(ctx context.Context) error
	// Formats are the answer's encodings, the default first.
	Formats []Format
	// CacheControl, when set, is the answer's Cache-Control header.
	CacheControl string
}

// A Format is one encoding of an answer.
type Format struct {
	// Name is its value for format=; when no Format of a Read has one,
	// format= is not read.
	Name string
	// MediaTypes are the Accept header's media types that choose it.
	MediaTypes  []string
	ContentType string
	// Write writes the answer, once Run succeeded (or, for a streamed
	// answer, running the query as it goes).
	Write func(ctx context.Context, w http.ResponseWriter) error
}

// Serve answers r with the Read that parse makes of its parameters for a
// token of scope. parse reads them through p; a *FieldError it returns is
// a 400 naming its field.
func (s Reads) Serve(w http.ResponseWriter, r *http.Request, parse func(p *Params, scope Scope) (Read, error)) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed", "")
		return
	}
	scope, ok := s.authorize(w, r)
	if !ok {
		return
	}
	params := r.URL.Query()
	read, err := parse(NewParams(params.Get), scope)
	format, ferr := negotiate(params.Get("format"), r.Header.Get("Accept"), read.Formats)
	if err == nil {
		err = ferr
	}
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	if read.Key != "" && !scope.Allows(read.Key) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("this token may read only keys that start with %q", scope.Prefix), "key")
		return
	}
	if read.Run != nil && !s.run(w, r.Context(), read) {
		return
	}
	w.Header().Set("Content-Type", format.ContentType)
	if read.CacheControl != "" {
		w.Header().Set("Cache-Control", read.CacheControl)
	}
	if read.Run == nil && r.Method == http.MethodHead {
		return
	}
	_ = format.Write(r.Context(), w)
}

// run runs read's query, or answers its failure and returns false.
func (s Reads) run(w http.ResponseWriter, ctx context.Context, read Read) bool {
	err := read.Run(ctx)
	var fe *FieldError
	switch {
	case err == nil:
		return true
	case errors.As(err, &fe):
		writeBadRequest(w, err)
	case errors.Is(err, ErrOverflow):
		s.logError("billing: "+read.What+" query passed the overflow guard", err)
		writeError(w, http.StatusUnprocessableEntity, ErrOverflow.Error(), "")
	case errors.Is(err, ErrTimeout):
		s.logError("billing: "+read.What+" query timed out", err)
		writeError(w, http.StatusServiceUnavailable, "the "+read.What+" query exceeded the statement timeout: "+read.OnTimeout, "")
	default:
		s.logError("billing: "+read.What+" query failed", err)
		writeError(w, http.StatusServiceUnavailable, "ledger unavailable", "")
	}
	return false
}

// authorize returns the scope of r's bearer token, or answers 503, 401 or
// 403 and returns false.
func (s Reads) authorize(w http.ResponseWriter, r *http.Request) (Scope, bool) {
	scope, err := s.Access.Authorize(r.Header.Get("Authorization"))
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

func (s Reads) logError(msg string, err error) {
	if s.Logger != nil {
		s.Logger.Error(msg, "err", err)
	}
}

// negotiate picks the format named by format= (when formats have names),
// else the one of the first media type in accept that one lists, else the
// first.
func negotiate(param, accept string, formats []Format) (Format, error) {
	var names []string
	for _, f := range formats {
		if f.Name != "" {
			names = append(names, f.Name)
		}
	}
	if param != "" && len(names) > 0 {
		for _, f := range formats {
			if f.Name == param {
				return f, nil
			}
		}
		slices.Sort(names)
		return Format{}, &FieldError{"format", fmt.Errorf("must be %s, got %q", strings.Join(names, " or "), param)}
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" {
			continue
		}
		for _, f := range formats {
			if slices.Contains(f.MediaTypes, mt) {
				return f, nil
			}
		}
	}
	if len(formats) == 0 {
		return Format{}, errors.New("billing: a read with no format")
	}
	return formats[0], nil
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

func writeError(w http.ResponseWriter, status int, msg, field string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := map[string]string{"error": msg}
	if field != "" {
		body["field"] = field
	}
	_ = json.NewEncoder(w).Encode(body)
}

// Params reads a request's query parameters for an endpoint's parser. The
// first that does not parse is kept as a *FieldError naming it (Err), and
// later ones are not parsed.
type Params struct {
	get func(string) string
	err error
}

// NewParams reads parameters through get (url.Values.Get).
func NewParams(get func(string) string) *Params { return &Params{get: get} }

// Get returns parameter name as it is.
func (p *Params) Get(name string) string { return p.get(name) }

// Err is the first parameter that did not parse, as a *FieldError.
func (p *Params) Err() error { return p.err }

// Param parses parameter name with parse; its error becomes p's Err, named
// by the parameter. After an error it parses nothing and returns zero.
func Param[T any](p *Params, name string, parse func(string) (T, error)) T {
	var zero T
	if p.err != nil {
		return zero
	}
	v, err := parse(p.get(name))
	if err != nil {
		p.err = &FieldError{Field: name, Err: err}
		return zero
	}
	return v
}
