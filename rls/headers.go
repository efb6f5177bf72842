package rls

import (
	"net/http"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/quotaplatform/quota/httplimit"
)

// Header names of envoyproxy/ratelimit's response headers (its defaults).
const (
	HeaderEnvoyLimit     = "RateLimit-Limit"     // requests_per_unit of the limiting descriptor
	HeaderEnvoyRemaining = "RateLimit-Remaining" // its limit_remaining
	HeaderEnvoyReset     = "RateLimit-Reset"     // its duration_until_reset, whole seconds
)

// headers are the response headers of the limiting descriptor: the one
// with a limit and the least remaining (an over-limit one first). None
// when no descriptor was limited.
func headers(checks []check, sts []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	best := -1
	for i := range checks {
		if sts[i].CurrentLimit == nil {
			continue
		}
		if best < 0 || betterHeader(sts[i], sts[best]) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	c, st := checks[best], sts[best]
	h := make(http.Header, 8)
	d := c.d
	d.Allowed = st.Code != rlsv3.RateLimitResponse_OVER_LIMIT
	httplimit.WriteHeaders(h, httplimit.Policy{Name: c.rule.label, Plan: c.rule.plan}, d)
	out := make([]*corev3.HeaderValue, 0, len(h)+3)
	out = append(out,
		headerValue(HeaderEnvoyLimit, strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)),
		headerValue(HeaderEnvoyRemaining, strconv.FormatUint(uint64(st.LimitRemaining), 10)),
		headerValue(HeaderEnvoyReset, strconv.FormatInt(int64(st.DurationUntilReset.AsDuration().Seconds()+0.999999999), 10)),
	)
	for _, k := range []string{httplimit.HeaderLimit, httplimit.HeaderRemaining, httplimit.HeaderReset, httplimit.HeaderStale,
		httplimit.HeaderPolicy, httplimit.HeaderRateLimit, httplimit.HeaderRetryAfter, httplimit.HeaderDegraded} {
		if v := h.Get(k); v != "" {
			out = append(out, headerValue(k, v))
		}
	}
	return out
}

func betterHeader(a, b *rlsv3.RateLimitResponse_DescriptorStatus) bool {
	aOver, bOver := a.Code == rlsv3.RateLimitResponse_OVER_LIMIT, b.Code == rlsv3.RateLimitResponse_OVER_LIMIT
	if aOver != bOver {
		return aOver
	}
	return a.LimitRemaining < b.LimitRemaining
}
