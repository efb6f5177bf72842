package limitapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/quotaplatform/quota/httplimit"
)

// apiError is an answer to bad input: a status, the field, a message.
type apiError struct {
	status int
	field  string
	msg    string
}

func (e *apiError) write(w http.ResponseWriter) { httplimit.WriteError(w, e.status, e.field, e.msg) }

func badRequest(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, field: field, msg: fmt.Sprintf(format, args...)}
}

// decodeBody reads one JSON object of at most limit bytes from r's body
// into v. Unknown fields, wrong types, trailing data and oversized bodies
// are errors naming the field.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) *apiError {
	return decodeFrom(w, r.Body, limit, v)
}

// decodeFrom is decodeBody reading body.
func decodeFrom(w http.ResponseWriter, body io.ReadCloser, limit int64, v any) *apiError {
	body = http.MaxBytesReader(w, body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
	case err == nil:
		return badRequest("body", "the body holds data after the JSON object")
	default:
		return jsonError(err, limit)
	}
	return nil
}

// jsonError turns a decoding error into an answer naming the field.
func jsonError(err error, limit int64) *apiError {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return &apiError{status: http.StatusRequestEntityTooLarge, field: "body", msg: fmt.Sprintf("the body is larger than %d bytes", limit)}
	case errors.As(err, &syntaxErr):
		return badRequest("body", "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return badRequest("body", "the body must be a JSON object, got %s", typeErr.Value)
		}
		return badRequest(field, "%s must be %s, got %s", field, jsonType(typeErr.Type.String()), typeErr.Value)
	case errors.Is(err, io.EOF):
		return badRequest("body", "the body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("body", "malformed JSON: the body ends early")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		if name == "" {
			return badRequest("body", "unknown field %q", name)
		}
		return badRequest(name, "unknown field %q", name)
	}
	return badRequest("body", "cannot read the body: %v", err)
}

// jsonType names a Go type the way a JSON client thinks of it.
func jsonType(goType string) string {
	switch goType {
	case "string", "*string":
		return "a string"
	case "int64", "*int64":
		return "an integer"
	case "float64", "*float64":
		return "a number"
	case "bool":
		return "a boolean"
	}
	if strings.HasPrefix(goType, "[]") {
		return "an array"
	}
	return "an object"
}
