package httplimit

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/region"
)

// Policy describes the limit a decision was taken against, for the IETF
// RateLimit-Policy field.
type Policy struct {
	// Name is the plan's name; "" writes "default".
	Name string
	// Plan is the plan's rate and capacity. Its time to fill from empty
	// (capacity / rate) is the policy's window, w. A zero Plan omits w.
	Plan region.Plan
}

// Header names written by WriteHeaders (canonical form).
const (
	HeaderLimit      = "X-Ratelimit-Limit"     // the plan's capacity, cost units
	HeaderRemaining  = "X-Ratelimit-Remaining" // region-wide remaining as of the last store sync, cost units
	HeaderReset      = "X-Ratelimit-Reset"     // seconds until the bucket is full again
	HeaderStale      = "X-Ratelimit-Stale"     // seconds since Remaining was synced with the store
	HeaderRetryAfter = "Retry-After"           // seconds until the cost could be admitted (rejections only)
	HeaderPolicy     = "Ratelimit-Policy"      // IETF: "name";q=capacity;w=seconds to fill
	HeaderRateLimit  = "Ratelimit"             // IETF: "name";r=remaining;t=seconds to reset
	// HeaderDegraded is set only on a decision taken while the store was
	// unavailable (region.Decision.Degraded); its value is the plan's
	// failure policy that decided it: degraded, open or closed.
	HeaderDegraded = "X-Ratelimit-Degraded"
)

// degradedValues are the HeaderDegraded values, one shared slice per
// failure policy: a degraded decision adds no allocation. Capacity-limited
// so that an Add by a handler copies instead of writing into them.
var degradedValues = func() map[limit.FailurePolicy][]string {
	m := make(map[limit.FailurePolicy][]string, len(limit.FailurePolicies))
	for _, f := range limit.FailurePolicies {
		m[f] = []string{string(f)}[:1:1]
	}
	return m
}()

// WriteHeaders sets the rate-limit response fields of d on h. Retry-After
// is set only when d is a rejection, and is at least one second;
// X-Ratelimit-Degraded only when d was decided without the store. It makes
// two allocations: every value is a substring of one string.
func WriteHeaders(h http.Header, p Policy, d region.Decision) {
	reset := ceilSeconds(d.Reset)
	var buf [192]byte
	var ends [7]int
	b := buf[:0]
	b = strconv.AppendInt(b, d.Limit, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, d.Remaining, 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	ends[2] = len(b)
	b = strconv.AppendFloat(b, d.Stale.Seconds(), 'f', 3, 64)
	ends[3] = len(b)
	// RateLimit-Policy: "name";q=limit;w=seconds to fill
	b = appendSFString(b, p.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, d.Limit, 10)
	if p.Plan.Rate > 0 && p.Plan.Capacity > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, max(int64(math.Ceil(p.Plan.Capacity/p.Plan.Rate)), 1), 10)
	}
	ends[4] = len(b)
	// RateLimit: "name";r=remaining;t=reset
	b = appendSFString(b, p.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	ends[5] = len(b)
	n := 6
	if !d.Allowed {
		b = strconv.AppendInt(b, max(ceilSeconds(d.RetryAfter), 1), 10)
		ends[6] = len(b)
		n = 7
	}
	all := string(b)
	vals := make([]string, n)
	from := 0
	for i := range n {
		vals[i] = all[from:ends[i]]
		from = ends[i]
	}
	h[HeaderLimit] = vals[0:1:1]
	h[HeaderRemaining] = vals[1:2:2]
	h[HeaderReset] = vals[2:3:3]
	h[HeaderStale] = vals[3:4:4]
	h[HeaderPolicy] = vals[4:5:5]
	h[HeaderRateLimit] = vals[5:6:6]
	if qs := d.Quotas(); qs != nil {
		h[HeaderPolicy], h[HeaderRateLimit] = quotaPolicies(p.Name, vals[4], vals[5], qs)
	}
	if n == 7 {
		h[HeaderRetryAfter] = vals[6:7:7]
	}
	if d.Degraded {
		v, ok := degradedValues[d.FailurePolicy()]
		if !ok { // a Decision the Limiter did not make carries no plan
			v = degradedValues[limit.FailDegraded]
		}
		h[HeaderDegraded] = v
	}
}

// quotaPolicies lists every policy of a plan with quotas: the bucket's
// (policy and state, as written) and one per quota, named after the plan
// and the period ("pro-month"), with the period's length as its window
// and the time to its end as its reset. Remaining is what the region may
// still admit in the period (docs/design.md [quotas]).
func quotaPolicies(name, bucketPolicy, bucketState string, qs []region.QuotaStatus) (policy, state []string) {
	pb := append(make([]byte, 0, 64*len(qs)+len(bucketPolicy)), bucketPolicy...)
	sb := append(make([]byte, 0, 64*len(qs)+len(bucketState)), bucketState...)
	if name == "" {
		name = "default"
	}
	now := time.Now()
	for _, q := range qs {
		label := name + "-" + string(q.Period)
		pb = append(pb, ", "...)
		pb = appendSFString(pb, label)
		pb = append(pb, ";q="...)
		pb = strconv.AppendInt(pb, q.Limit, 10)
		pb = append(pb, ";w="...)
		pb = strconv.AppendInt(pb, ceilSeconds(q.End.Sub(q.Start)), 10)
		sb = append(sb, ", "...)
		sb = appendSFString(sb, label)
		sb = append(sb, ";r="...)
		sb = strconv.AppendInt(sb, q.Remaining, 10)
		sb = append(sb, ";t="...)
		sb = strconv.AppendInt(sb, ceilSeconds(q.End.Sub(now)), 10)
	}
	return []string{string(pb)}, []string{string(sb)}
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// appendSFString appends s as a structured-field string (RFC 8941):
// printable ASCII, with '"' and '\' escaped, other bytes dropped; "" is
// written as "default".
func appendSFString(b []byte, s string) []byte {
	if s == "" {
		s = "default"
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20 && c <= 0x7e:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
