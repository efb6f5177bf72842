package quotabase

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/quotaplatform/quota/limit"
)

// DefaultSubject is the NATS subject quota-base requests travel on, and
// DefaultQueue the queue group the reconcilers' Servers share them in.
const (
	DefaultSubject = "quota.base"
	DefaultQueue   = "quota-base"
)

// MaxSpan is the longest period a request may ask for: a calendar month is
// at most 31 days, and the longest quota period (docs/design.md [quotas])
// is a month; 400 days leaves room for a year.
const MaxSpan = 400 * 24 * time.Hour

// Request asks for the spent cost of Key in the usage windows that start
// in [Start, End).
type Request struct {
	Key   string `json:"key"`
	Start string `json:"start"` // RFC 3339
	End   string `json:"end"`   // RFC 3339, after Start, at most MaxSpan after it
}

// Reply answers a Request: the base, or an error.
type Reply struct {
	Total    int64            `json:"total"`
	ByRegion map[string]int64 `json:"by_region,omitempty"`
	AsOf     time.Time        `json:"as_of,omitzero"`

	// Error, when not empty, says why there is no base; Field names the
	// request's bad field ("key", "start", "end"), empty when the request
	// was good and the ledger could not answer it (ErrBusy's and
	// ErrUnavailable's messages) or the body was not a request.
	Error string `json:"error,omitempty"`
	Field string `json:"field,omitempty"`
}

// Error messages a Server answers a good request with when it has no base,
// and the errors a Client returns for them.
const (
	msgBusy        = "busy"
	msgUnavailable = "ledger unavailable"
)

var (
	// ErrBusy: every Server that heard the request already ran as many
	// queries as it may (Config.MaxConcurrent). Try later.
	ErrBusy = errors.New("quotabase: reconciler busy")
	// ErrUnavailable: the ledger could not be read (Postgres down, or the
	// query ran past Config.StatementTimeout).
	ErrUnavailable = errors.New("quotabase: ledger unavailable")
	// ErrNoReconciler: no Server subscribes to the subject (NATS answered
	// "no responders"), or none answered within the Client's timeout.
	ErrNoReconciler = errors.New("quotabase: no reconciler answered")
	// ErrInvalidRequest is wrapped by every *FieldError.
	ErrInvalidRequest = errors.New("quotabase: invalid request")
)

// FieldError is a request the Server refused: Field is the bad field
// ("key", "start", "end"; empty when the body was not a request).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return "quotabase: invalid request: " + e.Msg
	}
	return "quotabase: invalid request: " + e.Field + ": " + e.Msg
}

// Unwrap makes errors.Is(err, ErrInvalidRequest) hold.
func (e *FieldError) Unwrap() error { return ErrInvalidRequest }

// NewRequest is the request for key's spent cost in [start, end).
func NewRequest(key string, start, end time.Time) Request {
	return Request{Key: key, Start: start.UTC().Format(time.RFC3339Nano), End: end.UTC().Format(time.RFC3339Nano)}
}

// parseRequest decodes and validates a request body: the key as
// limit.CheckKey takes it, start < end, end − start ≤ MaxSpan.
func parseRequest(data []byte) (key string, start, end time.Time, err error) {
	var req Request
	if err := json.Unmarshal(data, &req); err != nil {
		return "", start, end, &FieldError{Msg: "not a JSON request object"}
	}
	if err := limit.CheckKey(req.Key); err != nil {
		// CheckKey's message names the field and never quotes the key.
		return "", start, end, &FieldError{Field: "key", Msg: checkKeyMsg(err)}
	}
	parse := func(field, v string) (time.Time, error) {
		if v == "" {
			return time.Time{}, &FieldError{Field: field, Msg: "required (RFC 3339)"}
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, &FieldError{Field: field, Msg: fmt.Sprintf("not an RFC 3339 time: %q", truncate(v, 64))}
		}
		return t, nil
	}
	if start, err = parse("start", req.Start); err != nil {
		return "", start, end, err
	}
	if end, err = parse("end", req.End); err != nil {
		return "", start, end, err
	}
	switch {
	case !end.After(start):
		return "", start, end, &FieldError{Field: "end", Msg: "must be after start"}
	case end.Sub(start) > MaxSpan:
		return "", start, end, &FieldError{Field: "end", Msg: fmt.Sprintf("at most %d days after start", MaxSpan/(24*time.Hour))}
	}
	return req.Key, start, end, nil
}

// checkKeyMsg is limit.CheckKey's message without its kind's prefix
// ("invalid key: key must not be empty" → "must not be empty").
func checkKeyMsg(err error) string {
	msg := err.Error()
	for _, prefix := range []string{limit.ErrInvalidKey.Error() + ": ", "key "} {
		if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
			msg = msg[len(prefix):]
		}
	}
	return msg
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
