package export

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/region/store"
)

// Granularity is the length of an export period: UTC hours, days and
// months, or on the plan calendar (Calendar) the key's zone's clock hours,
// its local days and its months from the plan's anchor day.
type Granularity string

// Granularities.
const (
	Hour  Granularity = "hour"
	Day   Granularity = "day"
	Month Granularity = "month"
)

// ParseGranularity parses "hour", "day" or "month"; "" means Month.
func ParseGranularity(s string) (Granularity, error) {
	switch Granularity(s) {
	case "":
		return Month, nil
	case Hour, Day, Month:
		return Granularity(s), nil
	}
	return "", fmt.Errorf("must be hour, day or month, got %q", s)
}

// Start returns the start of the period holding t (UTC).
func (g Granularity) Start(t time.Time) time.Time {
	t = t.UTC()
	switch g {
	case Hour:
		return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), 0, 0, 0, time.UTC)
	case Day:
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// Next returns the start of the period after the one starting at start.
func (g Granularity) Next(start time.Time) time.Time {
	switch g {
	case Hour:
		return start.Add(time.Hour)
	case Day:
		return start.AddDate(0, 0, 1)
	}
	return start.AddDate(0, 1, 0)
}

// periods is the number of periods in [from, to), both period starts.
func (g Granularity) periods(from, to time.Time) int {
	switch g {
	case Hour:
		return int(to.Sub(from) / time.Hour)
	case Day:
		return int(to.Sub(from) / (24 * time.Hour))
	}
	return (to.Year()-from.Year())*12 + int(to.Month()) - int(from.Month())
}

// MaxPeriods is the most day or month periods one Query may span (a
// year of days); MaxHours the most hours (31 days: a month of hours, as
// `reconciler export --month` asks). An hour page reads each of its keys'
// hours before From too (the carry-over), so a longer hour range mostly
// makes pages slower, not larger.
const (
	MaxPeriods = 366
	MaxHours   = 31 * 24
)

// maxPeriods is the most periods of g one Query may span.
func (g Granularity) maxPeriods() int {
	if g == Hour {
		return MaxHours
	}
	return MaxPeriods
}

// Calendar is the calendar an export cuts each key's periods on.
type Calendar string

// Calendars.
const (
	// CalendarUTC cuts every key's periods on the UTC calendar: hours,
	// days from 00:00 UTC, months from the 1st at 00:00 UTC.
	CalendarUTC Calendar = "utc"
	// CalendarPlan cuts each key's periods on its plan's calendar, as its
	// quotas are counted (package period; quota_period_bounds in
	// migrations/008): days and months start at local midnight in the
	// plan's time_zone, months on its anchor_day (a shorter month's last
	// day), hours on the zone's clock hour. The plan is the key's as the
	// reconciler mirrors the catalogue (quota_key_plan: its assignment,
	// else the plan "default"); a key whose plan is not in the mirror, or
	// a plan without a time_zone, uses UTC with months from the 1st. The
	// plan's calendar at export time cuts the key's whole history, so
	// changing a plan's zone or anchor day re-cuts its keys' past periods
	// (and their carry-over), except those a sink sent when the Query
	// names it (Query.Frozen). A zone Postgres does not know fails the
	// export.
	CalendarPlan Calendar = "plan"
)

// ParseCalendar parses "utc" or "plan"; "" means CalendarUTC.
func ParseCalendar(s string) (Calendar, error) {
	switch Calendar(s) {
	case "":
		return CalendarUTC, nil
	case CalendarUTC, CalendarPlan:
		return Calendar(s), nil
	}
	return "", fmt.Errorf("must be utc or plan, got %q", s)
}

// maxSpan is the latest To of a plan-calendar Query from from: as many
// UTC hours, days or months as a UTC Query may span.
func (g Granularity) maxSpan(from time.Time) time.Time {
	switch g {
	case Hour:
		return from.Add(MaxHours * time.Hour)
	case Day:
		return from.AddDate(0, 0, MaxPeriods)
	}
	return from.AddDate(0, MaxPeriods, 0)
}

// longest is more than the longest period of g on any calendar (a day of
// 25 hours, a month of 31 days and a daylight-saving hour; hours are
// always one hour long): a period that starts before To ends before
// To + longest.
func (g Granularity) longest() time.Duration {
	switch g {
	case Hour:
		return time.Hour
	case Day:
		return 48 * time.Hour
	}
	return 32 * 24 * time.Hour
}

// planPeriods is at most the number of a key's periods that start in
// [from, to) on any calendar (its shortest: an hour, a 23-hour day, a
// 28-day month less an hour), for sizing pages.
func (g Granularity) planPeriods(from, to time.Time) int {
	shortest := time.Hour
	switch g {
	case Day:
		shortest = 23 * time.Hour
	case Month:
		shortest = 28*24*time.Hour - time.Hour
	}
	span := to.Sub(from)
	return int((span + shortest - 1) / shortest)
}

// FieldError says which query field is wrong; it is billing's, so that
// callers handle both packages' refusals alike.
type FieldError = billing.FieldError

// Query asks for every key's usage per period that starts in [From, To).
type Query struct {
	// From and To bound the periods' starts; To is exclusive. On the UTC
	// calendar they are period starts (a UTC hour for Hour, UTC midnight
	// for Day, the first of the month for Month), at most MaxHours hours
	// or MaxPeriods days or months apart. On the plan calendar they are
	// any instants, at most as far apart (31 days of hours, 366 days, 366
	// months): a key's row is its period that starts in [From, To), whole
	// (its windows up to its end, which may be after To).
	From, To    time.Time
	Granularity Granularity
	// Calendar cuts the periods: CalendarUTC ("" too) or CalendarPlan.
	Calendar Calendar
	// Prefix limits the export to keys that start with it ("" every key).
	Prefix string
	// After resumes after this key: only keys greater than it.
	After string
	// Cursor resumes after this row; zero starts at the beginning. Set at
	// most one of After and Cursor.
	Cursor Cursor
	// Now decides whether a period has ended (Row.Complete). Required.
	Now time.Time
	// Keys, if not nil, limits the export to these keys (in any order,
	// repeats ignored): a sink's incremental pass reads only the keys that
	// changed. Each key's rows are read through its primary key alone, so
	// the cost follows the keys asked, not the ledger's size.
	Keys []string
	// Frozen, on CalendarPlan, names a sink whose recorded periods keep
	// their bounds (billing_sink_events, this granularity): a period once
	// sent is never re-cut. The key's plan calendar cuts only its windows
	// outside them, each period clipped to the gap between frozen ones, so
	// a plan change applies from the end of the last period sent ("" none;
	// ignored on CalendarUTC, whose periods never move).
	Frozen string
	// Carry names a sink whose stored carries (billing_sink_carries,
	// migration 021) the export starts each key from: the key's windows
	// before its carry are not read, and its figures are those of a full
	// read as long as the carry is valid, which the sink keeps so (package
	// sink). A key without a carry at or before From is read from its first
	// report ("" none: every key is).
	Carry string
}

// Validate checks q; its errors are *FieldError naming the parameter.
func (q *Query) Validate() error {
	g, err := ParseGranularity(string(q.Granularity))
	if err != nil {
		return &FieldError{Field: "granularity", Err: err}
	}
	cal, err := ParseCalendar(string(q.Calendar))
	if err != nil {
		return &FieldError{Field: "calendar", Err: err}
	}
	if cal == CalendarPlan {
		switch {
		case q.From.IsZero():
			return &FieldError{Field: "from", Err: errors.New("required")}
		case q.To.IsZero():
			return &FieldError{Field: "to", Err: errors.New("required")}
		case !q.To.After(q.From):
			return &FieldError{Field: "to", Err: errors.New("must be after from")}
		case q.To.After(g.maxSpan(q.From)):
			return &FieldError{Field: "to", Err: fmt.Errorf("more than %d %ss after from", g.maxPeriods(), g)}
		}
		return q.validateRest()
	}
	switch {
	case q.From.IsZero():
		return &FieldError{Field: "from", Err: errors.New("required")}
	case !g.Start(q.From).Equal(q.From):
		return &FieldError{Field: "from", Err: fmt.Errorf("must be the start of a UTC %s", g)}
	case q.To.IsZero():
		return &FieldError{Field: "to", Err: errors.New("required")}
	case !g.Start(q.To).Equal(q.To):
		return &FieldError{Field: "to", Err: fmt.Errorf("must be the start of a UTC %s", g)}
	case !q.To.After(q.From):
		return &FieldError{Field: "to", Err: errors.New("must be after from")}
	case g.periods(q.From, q.To) > g.maxPeriods():
		return &FieldError{Field: "to", Err: fmt.Errorf("more than %d %ss in [from, to)", g.maxPeriods(), g)}
	}
	return q.validateRest()
}

// validateRest checks the fields both calendars share.
func (q *Query) validateRest() error {
	switch {
	case len(q.After) > store.MaxKeyLen:
		return &FieldError{Field: "after", Err: fmt.Errorf("longer than %d bytes", store.MaxKeyLen)}
	case q.After != "" && !q.Cursor.IsZero():
		return &FieldError{Field: "cursor", Err: errors.New("give after or cursor, not both")}
	case q.Now.IsZero():
		return errors.New("export: Query.Now is required")
	case len(q.Frozen) > store.MaxKeyLen:
		return &FieldError{Field: "frozen", Err: fmt.Errorf("longer than %d bytes", store.MaxKeyLen)}
	case len(q.Carry) > store.MaxKeyLen:
		return &FieldError{Field: "carry", Err: fmt.Errorf("longer than %d bytes", store.MaxKeyLen)}
	}
	return nil
}

// Cursor names one exported row: resuming from it yields the rows after
// it. Its String form is opaque to clients.
type Cursor struct {
	Key         string
	PeriodStart time.Time
}

// IsZero reports whether c names no row.
func (c Cursor) IsZero() bool { return c.Key == "" && c.PeriodStart.IsZero() }

// String encodes c as URL-safe base64 of "v1 <period start unix seconds> <key>".
func (c Cursor) String() string {
	if c.IsZero() {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "v1 %d %s", c.PeriodStart.Unix(), c.Key))
}

// ParseCursor decodes Cursor.String; "" is the zero Cursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, errors.New("not a cursor of this API")
	}
	var unix int64
	var key string
	rest, ok := strings.CutPrefix(string(b), "v1 ")
	if ok {
		num, k, found := strings.Cut(rest, " ")
		if _, err := fmt.Sscan(num, &unix); err != nil || !found || k == "" || len(k) > store.MaxKeyLen {
			ok = false
		}
		key = k
	}
	if !ok {
		return Cursor{}, errors.New("not a cursor of this API")
	}
	return Cursor{Key: key, PeriodStart: time.Unix(unix, 0).UTC()}, nil
}

// Row is one key's usage in one period, and what the period bills. Cost
// units.
//
// Billing is net of refunds with carry-over ([idempotency] in
// docs/design.md): Net = Allowed + Charged − Refunded may be negative (a
// refund lands in the window it is made in, which may be a later period
// than its request's), but Billed never is. A negative net is carried
// forward and deducted from the key's next periods until it is used up:
//
//	Billed     = max(0, Net − CarriedIn)
//	CarriedOut = max(0, CarriedIn − Net)
//
// where CarriedIn is the previous period's CarriedOut (0 for a key's first
// period). Credit never exceeds what the key was billed before: a refund
// beyond it (the key's cumulative net below zero) can only come from a
// forged report or one written before the reconciler bounded refunds by
// their region's recent net (refund_exceeds_spent), and is not credited but shown
// as Uncredited, and Net + Uncredited takes Net's place above. Over a
// key's periods so far, Σ Billed = Σ (Net + Uncredited) + the last
// CarriedOut: what is billed equals the net exactly once the credit is
// used up, and never less. The carry runs over every period of the key in
// the ledger before the row's, from the key's first report, whatever the
// Query's From: the figures of a row depend only on the ledger, not on the
// range asked for. Each granularity carries separately (a day's negative
// net may vanish in its month's).
type Row struct {
	Key         string    `json:"key"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	// Allowed is the cost of allowed decisions (usage_reports.spent):
	// gross, before refunds and post-hoc charges. Exports before this
	// name called it spent, which elsewhere meant Net; the column keeps
	// its place.
	Allowed  int64 `json:"allowed"`
	Rejected int64 `json:"rejected"`
	Degraded int64 `json:"degraded"`
	// Windows is the number of accounting windows that started in the
	// period.
	Windows int64 `json:"windows"`
	// Complete: the period has ended (PeriodEnd ≤ Query.Now) and every
	// process sent its final report for every window in it, or the
	// reconciler closed its row (ClosedByReconciler). An
	// incomplete period may still grow: windows are open or reports
	// outstanding. A complete period's Billed may still change when an
	// earlier period of the key changes (its CarriedIn does).
	Complete bool `json:"complete"`
	// Refunded is the cost given back by refunds (POST /v1/refund) in the
	// period's windows; Charged the cost taken by post-hoc charges (POST
	// /v1/charge).
	Refunded int64 `json:"refunded"`
	Charged  int64 `json:"charged"`
	// Net is Allowed + Charged − Refunded: GET /v1/usage's and the
	// ledger's views' net for the period; it may be negative.
	Net int64 `json:"net"`
	// CarriedIn is the credit (≥ 0) carried from the key's earlier
	// periods; CarriedOut the credit left for its later ones.
	CarriedIn int64 `json:"carried_in"`
	// Uncredited is the refund of the period beyond everything the key
	// was billed before it (≥ 0): not carried as credit. Not 0 only for
	// a forged or pre-bound report: review the key's rows.
	Uncredited int64 `json:"uncredited"`
	// Billed is what the period is invoiced (≥ 0): what the sinks send.
	Billed     int64 `json:"billed"`
	CarriedOut int64 `json:"carried_out"`
	// ClosedByReconciler is the number of the period's windows in which
	// the reconciler closed a process's row: the process died without its
	// final report (it sent nothing for reconciler serve --close-after
	// past the window's end), and its last report is what is billed.
	// Those windows count as final for Complete.
	ClosedByReconciler int64 `json:"closed_by_reconciler"`
	// Before is the key's carry-over state over its periods before this
	// one, from which CarriedIn and Uncredited follow: what a sink stores
	// so that its next export starts here (Query.Carry). Not encoded.
	Before Carried `json:"-"`
}

// Carried is a key's carry-over state over its periods before a boundary
// (the closed form above pageSQL): CumNet the sum of their nets, Low
// min(0, the lowest cumulative net after any of them), CumBilled the
// highest cumulative net less Low so far (what they billed). The next
// period's CarriedIn is CumBilled − (CumNet − Low). Exact is false when a
// figure passed ±(2^63−1) and was saturated: not to be stored.
type Carried struct {
	CumNet, Low, CumBilled int64
	Exact                  bool
}

// Carry applies the carry-over rule to one period: given the credit
// carried in (≥ 0) and the period's net, it returns what the period bills
// and the credit it carries out, both ≥ 0, with
// billed − carriedOut = net − carriedIn.
func Carry(carriedIn, net int64) (billed, carriedOut int64) {
	d := net - carriedIn
	if d >= 0 {
		return d, 0
	}
	return 0, -d
}

// Cursor is the cursor that resumes after r.
func (r *Row) Cursor() Cursor { return Cursor{Key: r.Key, PeriodStart: r.PeriodStart} }
