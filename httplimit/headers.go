package httplimit

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

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
)

// WriteHeaders sets the rate-limit response fields of d on h. Retry-After
// is set only when d is a rejection, and is at least one second.
func WriteHeaders(h http.Header, p Policy, d region.Decision) {
	reset := ceilSeconds(d.Reset)
	h[HeaderLimit] = []string{strconv.FormatInt(d.Limit, 10)}
	h[HeaderRemaining] = []string{strconv.FormatInt(d.Remaining, 10)}
	h[HeaderReset] = []string{strconv.FormatInt(reset, 10)}
	h[HeaderStale] = []string{strconv.FormatFloat(d.Stale.Seconds(), 'f', 3, 64)}
	if !d.Allowed {
		h[HeaderRetryAfter] = []string{strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10)}
	}
	name := sfString(p.Name)
	var b strings.Builder
	b.Grow(len(name) + 32)
	b.WriteString(name)
	b.WriteString(";q=")
	b.WriteString(strconv.FormatInt(d.Limit, 10))
	if p.Plan.Rate > 0 && p.Plan.Capacity > 0 {
		b.WriteString(";w=")
		b.WriteString(strconv.FormatInt(max(int64(math.Ceil(p.Plan.Capacity/p.Plan.Rate)), 1), 10))
	}
	h[HeaderPolicy] = []string{b.String()}
	b.Reset()
	b.WriteString(name)
	b.WriteString(";r=")
	b.WriteString(strconv.FormatInt(max(d.Remaining, 0), 10))
	b.WriteString(";t=")
	b.WriteString(strconv.FormatInt(reset, 10))
	h[HeaderRateLimit] = []string{b.String()}
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString quotes s as a structured-field string (RFC 8941): printable
// ASCII, with '"' and '\' escaped; other bytes are dropped.
func sfString(s string) string {
	if s == "" {
		s = "default"
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c <= 0x7e:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
