package multiregion

import (
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// Calendar quotas in the harness (docs/design.md [quotas]): a plan with
// quotas, written and awaited on every node, and the quota fields of a
// check's answer. The scenario that uses them is quota_test.go.

// Quota is one calendar quota of a plan: a limit in cost units per period
// ("hour", "day", "week", "month").
type Quota struct {
	Period string `json:"period"`
	Limit  int64  `json:"limit"`
}

// QuotaPlan is a plan with quotas as PUT /v1/limits/{plan} takes it and
// GET /v1/keys/{key} shows it: the token bucket, the quotas, and their
// calendar (TimeZone "" is UTC; AnchorDay 0 is the 1st).
type QuotaPlan struct {
	Rate      float64 `json:"rate"`
	Capacity  float64 `json:"capacity"`
	Quotas    []Quota `json:"quotas"`
	TimeZone  string  `json:"time_zone,omitempty"`
	AnchorDay int     `json:"anchor_day,omitempty"`
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

// SetQuotaPlan creates or changes a plan with quotas through the
// control-plane API.
func (c *Cluster) SetQuotaPlan(plan string, p QuotaPlan) {
	c.t.Helper()
	c.put("/v1/limits/"+url.PathEscape(plan), p, 30*time.Second)
}

// WaitQuotaPlan waits until every live node resolves each key to a plan
// with p's rate, capacity and quotas (GET /v1/keys/{key}): the push of the
// catalogue has converged.
func (c *Cluster) WaitQuotaPlan(timeout time.Duration, p QuotaPlan, keys ...string) {
	c.t.Helper()
	testserver.WaitFor(c.t, timeout, 50*time.Millisecond, func() error {
		for _, n := range c.Nodes() {
			if n.Crashed() {
				continue
			}
			for _, k := range keys {
				var v QuotaPlan
				if err := getJSONWith(c.client, n.URL()+"/v1/keys/"+url.PathEscape(k), c.spec.AdminToken, &v); err != nil {
					return fmt.Errorf("%s: %w", n.Name(), err)
				}
				if v.Rate != p.Rate || v.Capacity != p.Capacity || !sameQuotas(v.Quotas, p.Quotas) {
					return fmt.Errorf("%s sees key %s as %+v, want %+v", n.Name(), k, v, p)
				}
			}
		}
		return nil
	})
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
