package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quotaplatform/quota/region"
)

// Limiter is what a Service decides with; *region.Limiter is one. Its
// Plan resolver must be a Plans over the Service's Rules, or keys made
// here have no plan.
type Limiter interface {
	Allow(ctx context.Context, key string, cost int64) (region.Decision, error)
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Limiter decides every limited descriptor. Required.
	Limiter Limiter
	// Rules holds the configuration in force. Required.
	Rules *Rules
	// ResponseHeaders: answers carry response_headers_to_add (see
	// Service). Default false.
	ResponseHeaders bool
	// Metrics counts hits by result; nil counts nothing. Default nil.
	Metrics *Metrics
	// Logger logs at debug level only (a request's descriptor values may be
	// customer keys). Default slog.Default().
	Logger *slog.Logger
}

// MaxDescriptors is the most descriptors one request may carry.
const MaxDescriptors = 64

// Service answers ShouldRateLimit. Each request descriptor is matched
// against the domain's configuration as envoyproxy/ratelimit does: entry by
// entry, an entry's key and value before its key alone; the limit applies
// when the last entry matched a descriptor with a rate_limit. A
// descriptor's limit override (RateLimitOverride) takes the configured
// limit's place when the domain exists. Limits named in another matched
// limit's replaces are dropped. Each remaining limit spends its hits
// (the descriptor's hits_addend, else the request's, 0 counting as 1) from
// a region.Limiter key (Key); unlimited and unmatched descriptors answer OK
// without touching it, and requests_per_unit 0 answers OVER_LIMIT without
// touching it. The request is OVER_LIMIT when any descriptor is; a
// descriptor in shadow mode answers OK and is counted as shadow_mode.
//
// With ServiceConfig.ResponseHeaders, answers carry the limiting descriptor's (the
// one with the least remaining) headers: envoyproxy/ratelimit's
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, and the check
// API's X-Ratelimit-*, RateLimit-Policy, RateLimit, (when over the
// limit) Retry-After and (when decided without the store)
// X-Ratelimit-Degraded, as httplimit.WriteHeaders writes them.
//
// An unknown domain is a gRPC NotFound error; an empty domain, no
// descriptors, more than MaxDescriptors, or a descriptor without entries
// is InvalidArgument.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg ServiceConfig
}

// New returns a Service, checking cfg.
func New(cfg ServiceConfig) (*Service, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("rls: ServiceConfig.Limiter must not be nil")
	}
	if cfg.Rules == nil {
		return nil, errors.New("rls: ServiceConfig.Rules must not be nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg}, nil
}

// check is one descriptor's part of an answer.
type check struct {
	rule     *Rule
	override bool
	d        region.Decision
	over     bool
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "domain: must not be empty")
	case len(descs) == 0:
		return nil, status.Error(codes.InvalidArgument, "descriptors: must not be empty")
	case len(descs) > MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "descriptors: %d given, at most %d allowed", len(descs), MaxDescriptors)
	}
	cfg := s.cfg.Rules.Config()
	var root *node
	if cfg != nil {
		root = cfg.domains[req.GetDomain()]
	}
	if root == nil {
		return nil, status.Errorf(codes.NotFound, "domain: %q is not configured", req.GetDomain())
	}
	var buf [4]check
	checks := buf[:0]
	if len(descs) > len(buf) {
		checks = make([]check, 0, len(descs))
	}
	replaced := false
	for i, d := range descs {
		if len(d.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].entries: must not be empty", i)
		}
		c := check{rule: root.match(d.GetEntries())}
		if o := d.GetLimit(); o != nil {
			r, err := overrideRule(req.GetDomain(), o)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].limit: %v", i, err)
			}
			c.rule, c.override = r, true
		}
		replaced = replaced || (c.rule != nil && len(c.rule.Replaces) > 0)
		checks = append(checks, c)
	}
	if replaced {
		dropReplaced(checks)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	blocks := make([]statusBlock, len(checks))
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks))
	for i := range checks {
		c := &checks[i]
		st := &blocks[i].status
		resp.Statuses[i] = st
		if err := s.decide(ctx, req, descs[i], c, &blocks[i]); err != nil {
			return nil, err
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if s.cfg.ResponseHeaders {
		resp.ResponseHeadersToAdd = headers(checks, resp.Statuses)
	}
	return resp, nil
}

// match finds the rule of entries: nil when none applies.
func (n *node) match(entries []*rlv3.RateLimitDescriptor_Entry) *Rule {
	cur := n
	for i, e := range entries {
		next := cur.exact[entry{e.GetKey(), e.GetValue()}]
		if next == nil {
			next = cur.wild[e.GetKey()]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.rule
		}
		cur = next
	}
	return nil
}

// overrideRule is the rule of a request's limit override.
func overrideRule(domain string, o *rlv3.RateLimitDescriptor_RateLimitOverride) (*Rule, error) {
	var u Unit
	switch o.GetUnit() {
	case typev3.RateLimitUnit_SECOND:
		u = UnitSecond
	case typev3.RateLimitUnit_MINUTE:
		u = UnitMinute
	case typev3.RateLimitUnit_HOUR:
		u = UnitHour
	case typev3.RateLimitUnit_DAY:
		u = UnitDay
	default:
		return nil, fmt.Errorf("unit must be SECOND, MINUTE, HOUR or DAY, got %v", o.GetUnit())
	}
	r := &Rule{Domain: domain, Path: "override", RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u}
	r.label = r.Path
	r.id = overrideID(r.RequestsPerUnit, u)
	r.rpuInt = int64(r.RequestsPerUnit)
	r.plan = planOf(r.RequestsPerUnit, u, r.label)
	return r, nil
}

// dropReplaced removes the rules that another matched rule replaces.
func dropReplaced(checks []check) {
	for i := range checks {
		if checks[i].rule == nil || checks[i].rule.Name == "" {
			continue
		}
		for j := range checks {
			if j != i && checks[j].rule != nil && containsString(checks[j].rule.Replaces, checks[i].rule.Name) {
				checks[i].rule = nil
				break
			}
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hits is the cost of descriptor d of req: its own hits_addend, else the
// request's; 0 counts as 1.
func hits(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(max(min(h.GetValue(), math.MaxInt64), 1))
	}
	return int64(max(req.GetHitsAddend(), 1))
}

// statusBlock holds one descriptor's status and the messages it points
// to, so that an answer allocates them together.
type statusBlock struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// decide fills b's status for c.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor, c *check, b *statusBlock) error {
	st := &b.status
	st.Code = rlsv3.RateLimitResponse_OK
	r := c.rule
	switch {
	case r == nil:
		return nil
	case r.Unlimited:
		st.LimitRemaining = math.MaxUint32
		return nil
	}
	b.limit.Name = r.Name
	b.limit.RequestsPerUnit = r.RequestsPerUnit
	b.limit.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(r.Unit) // same numbering for second..day
	st.CurrentLimit = &b.limit
	cost := hits(req, d)
	if r.RequestsPerUnit == 0 || cost > r.rpuInt {
		// Nothing can pass: decided without the store.
		c.over = true
		c.d = region.Decision{Limit: r.rpuInt, RetryAfter: time.Duration(r.Unit.Seconds()) * time.Second}
	} else {
		dec, err := s.cfg.Limiter.Allow(ctx, Key(r.id, req.GetDomain(), d.GetEntries()), cost)
		switch {
		case errors.Is(err, region.ErrCostExceedsCapacity):
			c.over = true
			dec = region.Decision{Limit: r.rpuInt, RetryAfter: time.Duration(r.Unit.Seconds()) * time.Second}
		case err != nil:
			s.cfg.Logger.Debug("rls: decision failed", "domain", req.GetDomain(), "descriptor", r.Path, "err", err)
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return status.Errorf(codes.Unavailable, "descriptor %s: %v", r.Path, err)
		default:
			c.over = !dec.Allowed
		}
		c.d = dec
	}
	st.LimitRemaining = uint32(min(max(c.d.Remaining, 0), math.MaxUint32))
	b.reset.Seconds = int64(c.d.Reset / time.Second)
	b.reset.Nanos = int32(c.d.Reset % time.Second)
	st.DurationUntilReset = &b.reset
	switch {
	case c.over && r.ShadowMode:
		s.cfg.Metrics.hit(r, ResultShadowMode, cost)
	case c.over:
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		s.cfg.Metrics.hit(r, ResultOverLimit, cost)
	default:
		s.cfg.Metrics.hit(r, ResultWithinLimit, cost)
		if c.d.Remaining*5 < r.rpuInt {
			s.cfg.Metrics.hit(r, ResultNearLimit, cost)
		}
	}
	return nil
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// headerValue is one response header.
func headerValue(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, Value: v} }
