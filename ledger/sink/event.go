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
//
// Billed is what the period bills (export.Row.Billed: the net, allowed +
// charged − refunded, less the credit carried in from the key's earlier
// periods, never negative); a meter sums BilledDelta. The other figures
// are there to audit it, named as on every other surface (ledger/README.md,
// Vocabulary).
type Data struct {
	Key         string             `json:"key"`
	PeriodStart time.Time          `json:"period_start"`
	PeriodEnd   time.Time          `json:"period_end"`
	Granularity export.Granularity `json:"granularity"`
	// Billed is what the period bills, ≥ 0.
	Billed int64 `json:"billed"`
	// Allowed is the cost of allowed decisions (gross), Refunded and
	// Charged the period's refunds and post-hoc charges, Net = Allowed +
	// Charged − Refunded (may be negative), CarriedIn and CarriedOut the
	// credit carried in from the key's earlier periods and on to its
	// later ones, Uncredited the refund beyond all the key was billed
	// before (export.Row): Billed − CarriedOut = Net + Uncredited −
	// CarriedIn.
	//
	// Events of earlier releases also carried spent: the gross allowed
	// cost at first, then Net. No event names spent now (ledger/README.md,
	// Vocabulary): read Allowed or Net.
	Allowed    int64 `json:"allowed"`
	Refunded   int64 `json:"refunded"`
	Charged    int64 `json:"charged"`
	Net        int64 `json:"net"`
	CarriedIn  int64 `json:"carried_in"`
	CarriedOut int64 `json:"carried_out"`
	Uncredited int64 `json:"uncredited"`
	Rejected   int64 `json:"rejected"`
	Degraded   int64 `json:"degraded"`
	Windows    int64 `json:"windows"`
	// ClosedByReconciler is the number of the period's windows in which
	// the reconciler closed the row of a process that died without its
	// final report (export.Row.ClosedByReconciler): that process's last
	// report is billed.
	ClosedByReconciler int64 `json:"closed_by_reconciler"`
	// Revision is 0 for the first event of a period, n for its n-th
	// correction.
	Revision int `json:"revision"`
	// Replaces is the id of the event this one corrects ("" for revision 0).
	Replaces string `json:"replaces,omitempty"`
	// PreviousBilled is the Billed of the replaced event (0 for revision
	// 0); BilledDelta = Billed − PreviousBilled: a meter summing it counts
	// each period once, corrections included. A correction's BilledDelta
	// may be negative (a late refund); a period's sum never is. Events of
	// earlier releases repeated them as previous_spent and spent_delta;
	// a meter summing spent_delta must sum billed_delta.
	PreviousBilled int64 `json:"previous_billed"`
	BilledDelta    int64 `json:"billed_delta"`
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
