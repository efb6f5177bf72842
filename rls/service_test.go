package rls_test

import (
	"context"
	"math"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// edgeConfig follows the examples of envoyproxy/ratelimit's documentation.
const edgeConfig = `
domain: edge
descriptors:
  # every remote address gets its own counter of 3 a second
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 3}
  # ... except this one, whitelisted: no limit, no children
  - key: remote_address
    value: 10.0.0.1
  # ... and this one, unlimited
  - key: remote_address
    value: 10.0.0.2
    rate_limit: {unlimited: true}
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: path
        value: /search
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 4}
  - key: tenant
    value: parent-only
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: api
    value: old
    rate_limit: {name: old, unit: minute, requests_per_unit: 1}
  - key: api
    value: new
    rate_limit:
      name: new
      unit: minute
      requests_per_unit: 10
      replaces:
        - name: old
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: detailed
    detailed_metric: true
    rate_limit: {name: det, unit: day, requests_per_unit: 2}
`

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

type want struct {
	code     rlsv3.RateLimitResponse_Code   // overall
	statuses []rlsv3.RateLimitResponse_Code // per descriptor; nil: not checked
	// limits are each status's requests_per_unit; -1: no current limit.
	limits    []int
	remaining []int64 // per status; nil: not checked
}

type step struct {
	req  *rlsv3.RateLimitRequest
	want want
	// repeat sends the request this many times (at least once), expecting
	// want each time.
	repeat int
}

func req(hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits}
}

func TestShouldRateLimit(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
		// storeCalls: whether the limiter may be asked at all.
		noLimiter bool
	}{
		{name: "key without value: each runtime value gets its own counter", steps: []step{
			{req: req(0, desc("remote_address", "1.1.1.1")), want: want{code: ok, limits: []int{3}, remaining: []int64{2}}},
			{req: req(0, desc("remote_address", "1.1.1.1")), want: want{code: ok, remaining: []int64{1}}},
			{req: req(0, desc("remote_address", "1.1.1.1")), want: want{code: ok, remaining: []int64{0}}},
			{req: req(0, desc("remote_address", "1.1.1.1")), want: want{code: over, statuses: []rlsv3.RateLimitResponse_Code{over}, remaining: []int64{0}}},
			{req: req(0, desc("remote_address", "1.1.1.9")), want: want{code: ok, limits: []int{3}, remaining: []int64{2}}},
		}},
		{name: "whitelisted: value with no limit and no children", noLimiter: true, steps: []step{
			{req: req(0, desc("remote_address", "10.0.0.1")), repeat: 10, want: want{code: ok, limits: []int{-1}}},
		}},
		{name: "unlimited never touches the store", noLimiter: true, steps: []step{
			{req: req(0, desc("remote_address", "10.0.0.2")), repeat: 10, want: want{code: ok, limits: []int{-1}, remaining: []int64{math.MaxUint32}}},
		}},
		{name: "nested: the most specific descriptor wins", steps: []step{
			{req: req(0, desc("tenant", "acme", "path", "/search")), repeat: 2, want: want{code: ok, limits: []int{2}}},
			{req: req(0, desc("tenant", "acme", "path", "/search")), want: want{code: over, limits: []int{2}}},
			{req: req(0, desc("tenant", "acme", "path", "/list")), repeat: 4, want: want{code: ok, limits: []int{4}}},
			{req: req(0, desc("tenant", "acme", "path", "/list")), want: want{code: over}},
			{req: req(0, desc("tenant", "acme", "path", "/other")), want: want{code: ok, limits: []int{4}, remaining: []int64{3}}},
			{req: req(0, desc("tenant", "acme")), repeat: 5, want: want{code: ok, limits: []int{5}}},
			{req: req(0, desc("tenant", "acme")), want: want{code: over, limits: []int{5}}},
		}},
		{name: "unmatched entries and partial matches are not limited", noLimiter: true, steps: []step{
			{req: req(0, desc("tenant", "other")), repeat: 3, want: want{code: ok, limits: []int{-1}}},
			{req: req(0, desc("tenant", "acme", "path", "/search", "method", "GET")), repeat: 3, want: want{code: ok, limits: []int{-1}}},
			{req: req(0, desc("tenant", "parent-only")), repeat: 3, want: want{code: ok, limits: []int{-1}}},
			{req: req(0, desc("nobody", "x")), want: want{code: ok, limits: []int{-1}}},
		}},
		{name: "a parent with no limit of its own limits its children", steps: []step{
			{req: req(0, desc("tenant", "parent-only", "path", "/a")), want: want{code: ok, limits: []int{1}}},
			{req: req(0, desc("tenant", "parent-only", "path", "/a")), want: want{code: over}},
		}},
		{name: "shadow mode answers OK and counts", steps: []step{
			{req: req(0, desc("shadowed", "s1")), repeat: 3, want: want{code: ok, statuses: []rlsv3.RateLimitResponse_Code{ok}, limits: []int{1}}},
		}},
		{name: "replaces drops the named limit", steps: []step{
			{req: req(0, desc("api", "old"), desc("api", "new")), repeat: 3, want: want{code: ok, limits: []int{-1, 10}}},
			{req: req(0, desc("api", "old")), want: want{code: ok, limits: []int{1}}},
			{req: req(0, desc("api", "old")), want: want{code: over, limits: []int{1}}},
		}},
		{name: "request hits_addend is the cost, 0 counts as 1", steps: []step{
			{req: req(2, desc("remote_address", "3.3.3.3")), want: want{code: ok, remaining: []int64{1}}},
			{req: req(0, desc("remote_address", "3.3.3.3")), want: want{code: ok, remaining: []int64{0}}},
			{req: req(1, desc("remote_address", "3.3.3.3")), want: want{code: over}},
			{req: req(4, desc("remote_address", "3.3.3.4")), want: want{code: over, limits: []int{3}}}, // above the burst
		}},
		{name: "descriptor hits_addend wins over the request's", steps: []step{
			{req: req(1, withHits(desc("remote_address", "5.5.5.5"), 3), desc("remote_address", "5.5.5.6")),
				want: want{code: ok, remaining: []int64{0, 2}}},
		}},
		{name: "limit override replaces the configured limit", steps: []step{
			{req: req(0, withOverride(desc("remote_address", "4.4.4.4"), 1, typev3.RateLimitUnit_MINUTE)), want: want{code: ok, limits: []int{1}, remaining: []int64{0}}},
			{req: req(0, withOverride(desc("remote_address", "4.4.4.4"), 1, typev3.RateLimitUnit_MINUTE)), want: want{code: over, limits: []int{1}}},
			{req: req(0, withOverride(desc("nobody", "y"), 2, typev3.RateLimitUnit_HOUR)), want: want{code: ok, limits: []int{2}}},
		}},
		{name: "several descriptors: OVER_LIMIT if any is", steps: []step{
			{req: req(0, desc("api", "old")), want: want{code: ok}},
			{req: req(0, desc("remote_address", "6.6.6.6"), desc("api", "old"), desc("remote_address", "10.0.0.1")),
				want: want{code: over, statuses: []rlsv3.RateLimitResponse_Code{ok, over, ok}, limits: []int{3, 1, -1}}},
		}},
		{name: "requests_per_unit 0 refuses without the store", noLimiter: true, steps: []step{
			{req: req(0, desc("blocked", "b")), repeat: 2, want: want{code: over, limits: []int{0}}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startHarness(t, mustParse(t, edgeConfig), harnessOptions{})
			ctx := context.Background()
			for i, s := range tc.steps {
				for n := range max(s.repeat, 1) {
					resp, err := h.client.ShouldRateLimit(ctx, s.req)
					if err != nil {
						t.Fatalf("step %d.%d: %v", i, n, err)
					}
					checkResponse(t, i, n, resp, s.want)
				}
			}
			if calls := h.calls.calls.Load(); tc.noLimiter && calls != 0 {
				t.Errorf("the limiter was asked %d times, want never", calls)
			}
		})
	}
}

func checkResponse(t *testing.T, i, n int, resp *rlsv3.RateLimitResponse, w want) {
	t.Helper()
	if resp.OverallCode != w.code {
		t.Fatalf("step %d.%d: overall %v, want %v (%v)", i, n, resp.OverallCode, w.code, resp)
	}
	for j, c := range w.statuses {
		if got := resp.Statuses[j].Code; got != c {
			t.Errorf("step %d.%d: status %d %v, want %v", i, n, j, got, c)
		}
	}
	for j, l := range w.limits {
		cl := resp.Statuses[j].CurrentLimit
		switch {
		case l < 0 && cl != nil:
			t.Errorf("step %d.%d: status %d has limit %v, want none", i, n, j, cl)
		case l >= 0 && (cl == nil || cl.RequestsPerUnit != uint32(l)):
			t.Errorf("step %d.%d: status %d has limit %v, want %d", i, n, j, cl, l)
		}
	}
	for j, r := range w.remaining {
		if got := resp.Statuses[j].LimitRemaining; int64(got) != r {
			t.Errorf("step %d.%d: status %d remaining %d, want %d", i, n, j, got, r)
		}
	}
}

func withHits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withOverride(d *rlv3.RateLimitDescriptor, n uint32, u typev3.RateLimitUnit) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: u}
	return d
}

func TestShouldRateLimitErrors(t *testing.T) {
	h := startHarness(t, mustParse(t, edgeConfig), harnessOptions{})
	cases := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
		msg  string
	}{
		{"unknown domain", &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "b")}}, codes.NotFound, `domain: "nope" is not configured`},
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "b")}}, codes.InvalidArgument, "domain: must not be empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument, "descriptors: must not be empty"},
		{"descriptor without entries", req(0, desc("a", "b"), desc()), codes.InvalidArgument, "descriptors[1].entries: must not be empty"},
		{"override unit", req(0, withOverride(desc("a", "b"), 1, typev3.RateLimitUnit_YEAR)), codes.InvalidArgument, "descriptors[0].limit: unit must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.ShouldRateLimit(context.Background(), tc.req)
			st := status.Convert(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Fatalf("got %v %q, want %v containing %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
}

func TestResponseHeaders(t *testing.T) {
	h := startHarness(t, mustParse(t, edgeConfig), harnessOptions{headers: true})
	resp, err := h.client.ShouldRateLimit(context.Background(), req(0, desc("tenant", "acme", "path", "/search"), desc("remote_address", "7.7.7.7")))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		got[hv.Key] = hv.Value
	}
	// The limiting descriptor is the one with the least remaining: the
	// path's 2 a minute, 1 left.
	for k, v := range map[string]string{
		"RateLimit-Limit":       "2",
		"RateLimit-Remaining":   "1",
		"X-Ratelimit-Limit":     "2",
		"X-Ratelimit-Remaining": "1",
		"Ratelimit-Policy":      `"tenant_acme.path_/search";q=2;w=60`,
		"Ratelimit":             `"tenant_acme.path_/search";r=1;t=30`,
	} {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	resp, err = h.client.ShouldRateLimit(context.Background(), req(3, desc("tenant", "acme", "path", "/search")))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, hv := range resp.ResponseHeadersToAdd {
		found = found || hv.Key == "Retry-After"
	}
	if resp.OverallCode != over || !found {
		t.Errorf("over the limit: %v, Retry-After present %v", resp.OverallCode, found)
	}
	// Off: no headers.
	h2 := startHarness(t, mustParse(t, edgeConfig), harnessOptions{})
	resp, err = h2.client.ShouldRateLimit(context.Background(), req(0, desc("remote_address", "7.7.7.7")))
	if err != nil || len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers off: %v, %v", resp.GetResponseHeadersToAdd(), err)
	}
}

func TestMetrics(t *testing.T) {
	h := startHarness(t, mustParse(t, edgeConfig), harnessOptions{})
	ctx := context.Background()
	send := func(r *rlsv3.RateLimitRequest, n int) {
		for range n {
			if _, err := h.client.ShouldRateLimit(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(req(0, desc("remote_address", "8.8.8.8")), 5)    // 3 within (the 3rd near), 2 over
	send(req(0, desc("remote_address", "8.8.8.9")), 1)    // within
	send(req(0, desc("shadowed", "x")), 3)                // 1 within (and near), 2 shadow
	send(req(0, desc("detailed", "d")), 3)                // detailed: 2 within (the 2nd near), 1 over
	send(req(0, desc("remote_address", "10.0.0.2")), 100) // unlimited: not counted
	const name = "quota_rls_hits_total"
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"edge", "", "within_limit"}, 4 + 1},
		{[]string{"edge", "", "near_limit"}, 2}, // 8.8.8.8's 3rd, shadowed's 1st
		{[]string{"edge", "", "over_limit"}, 2},
		{[]string{"edge", "", "shadow_mode"}, 2},
		{[]string{"edge", "det", "within_limit"}, 2},
		{[]string{"edge", "det", "near_limit"}, 1},
		{[]string{"edge", "det", "over_limit"}, 1},
	} {
		got := counterValue(t, h, name, c.labels)
		if got != c.want {
			t.Errorf("%s%v = %v, want %v", name, c.labels, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(h.reg, name); n != 7 {
		t.Errorf("%d series, want 7 (no runtime values as labels)", n)
	}
}

func counterValue(t *testing.T, h *harness, name string, labels []string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				w := map[string]string{"domain": labels[0], "descriptor": labels[1], "result": labels[2]}[lp.GetName()]
				if lp.GetValue() != w {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
