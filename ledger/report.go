package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/quotaplatform/quota/region/store"
)

// Report is one process's cumulative usage of one key in one accounting
// window, as it travels over JetStream (JSON). Counters are totals since the
// window started, not deltas; Seq grows with every report of the same
// (ProcessID, Key, WindowStart), so that of two reports the later one wins.
type Report struct {
	Key         string    `json:"key"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	ProcessID   string    `json:"process_id"`
	Region      string    `json:"region"`
	// Spent is the cost of allowed decisions (degraded ones included).
	Spent int64 `json:"spent"`
	// Leased is the net permits taken from the store; it may go down between
	// reports when permits are returned.
	Leased int64 `json:"leased"`
	// Rejected is the cost of rejected decisions.
	Rejected int64 `json:"rejected"`
	// Degraded is the cost allowed in degraded mode, a part of Spent.
	Degraded int64 `json:"degraded"`
	// WouldReject is the cost of checks a shadow plan would have rejected
	// (limit.Usage.WouldReject): they were allowed without spending, so
	// they are in neither Spent nor Rejected.
	WouldReject int64 `json:"would_reject,omitempty"`
	// Refunded is the cost given back by refunds (limit.Usage.Refunded);
	// Charged the cost taken by post-hoc charges (limit.Usage.Charged),
	// not part of Spent. Billing bills Spent + Charged − Refunded. A
	// report from before refunds carries neither: zero.
	Refunded int64 `json:"refunded,omitempty"`
	Charged  int64 `json:"charged,omitempty"`
	// Final says the process will not report this window again.
	Final bool `json:"final"`
	// Seq numbers the reports of one (ProcessID, Key, WindowStart) from 1.
	Seq    int64     `json:"seq"`
	SentAt time.Time `json:"sent_at"`
}

// Wire-format limits, checked by Validate.
const (
	// MaxIDLen is the longest process ID or region name, in bytes.
	MaxIDLen = 256
)

// ErrInvalidReport is wrapped by every Validate and DecodeReport failure.
var ErrInvalidReport = errors.New("ledger: invalid report")

// Validate checks the fields a consumer relies on.
func (r *Report) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidReport, field, fmt.Sprintf(format, args...))
	}
	switch {
	case r.Key == "" || len(r.Key) > store.MaxKeyLen:
		return bad("key", "length %d not in [1, %d]", len(r.Key), store.MaxKeyLen)
	case r.ProcessID == "" || len(r.ProcessID) > MaxIDLen:
		return bad("process_id", "length %d not in [1, %d]", len(r.ProcessID), MaxIDLen)
	case r.Region == "" || len(r.Region) > MaxIDLen:
		return bad("region", "length %d not in [1, %d]", len(r.Region), MaxIDLen)
	case r.WindowStart.IsZero():
		return bad("window_start", "missing")
	case !r.WindowEnd.After(r.WindowStart):
		return bad("window_end", "%v not after window_start %v", r.WindowEnd, r.WindowStart)
	case r.Spent < 0:
		return bad("spent", "negative (%d)", r.Spent)
	case r.Rejected < 0:
		return bad("rejected", "negative (%d)", r.Rejected)
	case r.Degraded < 0 || r.Degraded > r.Spent:
		return bad("degraded", "%d not in [0, spent=%d]", r.Degraded, r.Spent)
	case r.WouldReject < 0:
		return bad("would_reject", "negative (%d)", r.WouldReject)
	case r.Refunded < 0:
		return bad("refunded", "negative (%d)", r.Refunded)
	case r.Charged < 0:
		return bad("charged", "negative (%d)", r.Charged)
	case r.Seq < 1:
		return bad("seq", "must be at least 1, got %d", r.Seq)
	}
	for _, f := range [...]struct{ name, v string }{{"key", r.Key}, {"process_id", r.ProcessID}, {"region", r.Region}} {
		if strings.ContainsRune(f.v, 0) || !utf8.ValidString(f.v) {
			return bad(f.name, "not valid UTF-8 text")
		}
	}
	return nil
}

// MsgID names the report: equal IDs mean equal reports. It is easy to
// guess, so the Reporter does not publish under it: JetStream's duplicate
// window spans the stream, and another region publishing first under a
// guessable ID would make the genuine report a duplicate (the Reporter's
// IDs carry a random nonce; see Reporter.msgID).
func (r *Report) MsgID() string {
	var b strings.Builder
	b.Grow(len(r.Region) + len(r.ProcessID) + len(r.Key) + 43)
	b.WriteString(r.Region)
	b.WriteByte('|')
	b.WriteString(r.ProcessID)
	b.WriteByte('|')
	b.WriteString(r.Key)
	b.WriteByte('|')
	b.WriteString(strconv.FormatInt(r.WindowStart.UnixNano(), 10))
	b.WriteByte('|')
	b.WriteString(strconv.FormatInt(r.Seq, 10))
	return b.String()
}

// Encode returns the report's wire form (JSON).
func (r *Report) Encode() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("ledger: encode report: %w", err)
	}
	return b, nil
}

// DecodeReport parses and validates a report's wire form.
func DecodeReport(data []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrInvalidReport, err)
	}
	if err := r.Validate(); err != nil {
		return Report{}, err
	}
	return r, nil
}
