package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/quotaplatform/quota/region"
)

// ErrorBody is the JSON body of every error answer: a message, and the
// request field it is about ("key", "cost", "body", "Authorization"…).
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// WriteError answers status with an ErrorBody.
func WriteError(w http.ResponseWriter, status int, field, msg string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // messages quote "<admin token>" and keys as they are
	_ = enc.Encode(ErrorBody{Error: msg, Field: field})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// Classify maps a limiter error to an HTTP status and the request field it
// is about: a bad key or cost is 400, a key with no plan is 404, anything
// else is 500 (field "").
func Classify(err error) (status int, field string) {
	switch {
	case errors.Is(err, region.ErrInvalidKey):
		return http.StatusBadRequest, "key"
	case errors.Is(err, region.ErrInvalidCost), errors.Is(err, region.ErrCostExceedsCapacity):
		return http.StatusBadRequest, "cost"
	case errors.Is(err, region.ErrUnknownEndpoint):
		return http.StatusBadRequest, "endpoint"
	case errors.Is(err, region.ErrUnknownPlan), errors.Is(err, region.ErrInvalidPlan):
		return http.StatusNotFound, "key"
	}
	return http.StatusInternalServerError, ""
}

// RedactKey returns err's message with key, quoted or not, replaced by
// <key>, for logs: a limit key may be an API key or name a customer, and
// stays out of logs above debug level. A key shorter than 4 bytes is
// replaced only where quoted, so that it does not mangle the message.
func RedactKey(err error, key string) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if key == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, strconv.Quote(key), `"<key>"`)
	if len(key) >= 4 {
		msg = strings.ReplaceAll(msg, key, "<key>")
	}
	return msg
}
