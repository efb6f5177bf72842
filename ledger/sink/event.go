package sink

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/quotaplatform/quota/ledger/export"
)

// Defaults of the CloudEvents attributes.
const (
	DefaultSource = "quota-ledger"
	DefaultType   = "com.quotaplatform.usage.period"
)

// Data is an event's data (JSON). Cost units.
type Data struct {
	Key         string             `json:"key"`
	PeriodStart time.Time          `json:"period_start"`
	PeriodEnd   time.Time          `json:"period_end"`
	Granularity export.Granularity `json:"granularity"`
	Spent       int64              `json:"spent"`
	Rejected    int64              `json:"rejected"`
	Degraded    int64              `json:"degraded"`
	Windows     int64              `json:"windows"`
	// Revision is 0 for the first event of a period, n for its n-th
	// correction.
	Revision int `json:"revision"`
	// Replaces is the id of the event this one corrects ("" for revision 0).
	Replaces string `json:"replaces,omitempty"`
	// PreviousSpent is the spent of the replaced event (0 for revision 0);
	// SpentDelta = Spent − PreviousSpent: a meter summing it counts each
	// period once, corrections included.
	PreviousSpent int64 `json:"previous_spent"`
	SpentDelta    int64 `json:"spent_delta"`
}

// EventID is the id of revision rev of key's period starting at start: a
// hash, stable across runs, that reveals nothing of the key.
func EventID(key string, start time.Time, g export.Granularity, rev int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s", key, start.UTC().Format(time.RFC3339), g)
	if rev > 0 {
		h.Write([]byte("\x00r" + strconv.Itoa(rev)))
	}
	return "qu-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// newEvent builds the event of d: source, type, subject the key, time the
// period's end (so a resend is identical).
func newEvent(source, typ, id string, d json.RawMessage, key string, end time.Time) (cloudevents.Event, error) {
	ev := cloudevents.NewEvent()
	ev.SetID(id)
	ev.SetSource(source)
	ev.SetType(typ)
	ev.SetSubject(key)
	ev.SetTime(end)
	if err := ev.SetData(cloudevents.ApplicationJSON, d); err != nil {
		return ev, fmt.Errorf("sink: event data: %w", err)
	}
	return ev, ev.Validate()
}
