package multiregion

import (
	"slices"
	"time"
)

// Calendar quotas in the harness (docs/design.md [quotas]): a plan's
// quotas (PlanFields.Quotas) and the quota fields of a check's answer. The scenario that uses them is quota_test.go.

// Quota is one calendar quota of a plan: a limit in cost units per period
// ("hour", "day", "week", "month").
type Quota struct {
	Period string `json:"period"`
	Limit  int64  `json:"limit"`
}

// QuotaRemaining is one quota as a check's answer lists it in
// "quota_remaining": the fleet's limit in the period, what the answering
// region may still admit, and the milliseconds to the period's end.
type QuotaRemaining struct {
	Period    string `json:"period"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	ResetMS   int64  `json:"reset_ms"`
}

// sameQuotas compares two quota lists in any order (the API lists them
// shortest period first).
func sameQuotas(a, b []Quota) bool {
	if len(a) != len(b) {
		return false
	}
	for _, q := range b {
		if !slices.Contains(a, q) {
			return false
		}
	}
	return true
}

// quotaOf returns the answer's entry for period, if listed.
func quotaOf(o Observed, period string) (QuotaRemaining, bool) {
	for _, q := range o.Quotas {
		if q.Period == period {
			return q, true
		}
	}
	return QuotaRemaining{}, false
}

// monthEndUTC is the end of t's calendar month in UTC with months starting
// on the 1st: computed here on its own, not with the daemon's calendar
// (package period), so that the check compares two computations.
func monthEndUTC(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}
