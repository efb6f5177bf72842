package httplimit

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/store"
)

// ErrorBody is the JSON body of every error answer: a message, and the
// request field it is about ("key", "cost", "body", "Authorization"…).
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// WriteError answers status with an ErrorBody. The body is written by
// hand, as encoding/json writes it without HTML escaping (messages quote
// "<admin token>" and keys as they are), from a pooled buffer.
func WriteError(w http.ResponseWriter, status int, field, msg string) {
	buf := errorBufs.Get().(*[]byte)
	b := append((*buf)[:0], `{"error":`...)
	b = appendJSONString(b, msg)
	if field != "" {
		b = append(b, `,"field":`...)
		b = appendJSONString(b, field)
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(status)
	w.Write(b)
	if cap(b) <= 4<<10 {
		*buf = b
		errorBufs.Put(buf)
	}
}

var errorBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// Header values shared by every answer; a capacity of one makes an Add by
// a later handler copy them rather than write into them.
var (
	contentTypeJSON = []string{"application/json"}
	nosniff         = []string{"nosniff"}
)

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it with SetEscapeHTML(false): '"', '\\' and control characters
// escaped, invalid UTF-8 replaced by U+FFFD, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Classify maps a limiter error to an HTTP status and the request field it
// is about: a bad key, cost or lease id is 400, as is a concurrency call
// for a key whose plan has no concurrency limit; a key with no plan is
// 404; a store that cannot be reached (a slot release, a refund or a
// charge) is 503; anything else is 500 (field ""). Request ids
// (docs/design.md [idempotency]): a bad one is 400 and a refund above the
// charge 400 (field cost), an unknown one 404, one already refunded or
// charged with another cost 409, a store that records none 501.
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
	case errors.Is(err, region.ErrInvalidLeaseID):
		return http.StatusBadRequest, "lease_id"
	case errors.Is(err, region.ErrNoConcurrency):
		return http.StatusBadRequest, "key"
	case errors.Is(err, region.ErrInvalidRequestID):
		return http.StatusBadRequest, "request_id"
	case errors.Is(err, region.ErrRefundExceedsCharge):
		return http.StatusBadRequest, "cost"
	case errors.Is(err, region.ErrUnknownRequest):
		return http.StatusNotFound, "request_id"
	case errors.Is(err, region.ErrRequestConflict):
		return http.StatusConflict, "request_id"
	case errors.Is(err, region.ErrNoIdempotency):
		return http.StatusNotImplemented, "request_id"
	case errors.Is(err, store.ErrStoreUnavailable):
		return http.StatusServiceUnavailable, ""
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
