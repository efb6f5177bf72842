package region

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/period"
)

//go:embed lua/quota.lua
var quotaLua string

var quotaScript = redis.NewScript(quotaLua)

var (
	_ QuotaStore = (*RedisStore)(nil)
	_ QuotaStore = (*MemoryStore)(nil)
)

// QuotaKey is the Redis key of key's counter of the period of unit that
// starts at start: a hash on the same Cluster slot as its bucket.
func (s *RedisStore) QuotaKey(key string, unit period.Unit, start time.Time) string {
	return s.BucketKey(key) + ":q:" + string(unit) + ":" + strconv.FormatInt(start.Unix(), 10)
}

// LeaseQuota implements QuotaStore with one call of lua/quota.lua.
func (s *RedisStore) LeaseQuota(ctx context.Context, call QuotaCall) (QuotaReply, error) {
	if err := call.validate(); err != nil {
		return QuotaReply{}, err
	}
	keys := make([]string, len(call.Periods))
	args := make([]any, 0, 4+7*len(call.Periods))
	args = append(args, call.Want, call.Min, call.Charge, flagArg(call.NeedBase))
	for i, p := range call.Periods {
		keys[i] = s.QuotaKey(call.Key, p.Unit, p.Start)
		var total, reg, at int64
		if p.Base != nil {
			total, reg, at = p.Base.Total, p.Base.Region, p.Base.AsOf.UnixMicro()
		}
		args = append(args, p.Limit, strconv.FormatFloat(p.Share, 'g', -1, 64), p.Return,
			p.End.Add(quotaTTL).UnixMilli(), total, reg, at)
	}
	res, err := quotaScript.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		kind := ErrStoreRejected
		if isTransient(err) {
			kind = ErrStoreUnavailable
		}
		return QuotaReply{}, fmt.Errorf("%w: redis quota lease %q: %w", kind, call.Key, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 1+3*len(call.Periods) {
		return QuotaReply{}, fmt.Errorf("%w: quota reply is %T of %d, want %d integers", ErrStoreUnavailable, res, len(parts), 1+3*len(call.Periods))
	}
	n := make([]int64, len(parts))
	for i, p := range parts {
		v, ok := p.(int64)
		if !ok {
			return QuotaReply{}, fmt.Errorf("%w: quota reply element %d is %T, want an integer", ErrStoreUnavailable, i, p)
		}
		n[i] = v
	}
	rep := QuotaReply{Granted: n[0]}
	for i := range call.Periods {
		c := QuotaCounter{Used: n[1+3*i], Allowance: n[2+3*i]}
		if bt := n[3+3*i]; bt > 0 {
			c.BaseAt = time.UnixMicro(bt)
		}
		rep.Counters[i] = c
	}
	if rep.Granted < 0 || rep.Granted > call.Want {
		return QuotaReply{}, fmt.Errorf("%w: quota granted %d of %d asked", ErrStoreUnavailable, rep.Granted, call.Want)
	}
	return rep, nil
}

// memQuota is one quota counter (lua/quota.lua's hash).
type memQuota struct {
	used, baseTotal, baseRegion int64
	baseAt                      int64 // unix µs; 0 = none
	expires                     time.Time
}

// LeaseQuota implements QuotaStore, as lua/quota.lua does.
func (s *MemoryStore) LeaseQuota(ctx context.Context, call QuotaCall) (QuotaReply, error) {
	if err := call.validate(); err != nil {
		return QuotaReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return QuotaReply{}, err
	}
	now := s.clock.Now()
	sh := s.lockShard(call.Key, now)
	defer sh.mu.Unlock()
	if sh.quotas == nil {
		sh.quotas = make(map[string]*memQuota)
	}
	var next [MaxQuotaPeriods]memQuota
	var rep QuotaReply
	g := call.Want
	for i, p := range call.Periods {
		q := memQuota{}
		if have := sh.quotas[memQuotaKey(call.Key, p)]; have != nil && now.Before(have.expires) {
			q = *have
		}
		if b := p.Base; b != nil && b.AsOf.UnixMicro() > q.baseAt {
			q.baseTotal, q.baseRegion, q.baseAt = b.Total, b.Region, b.AsOf.UnixMicro()
			q.used = max(q.used, q.baseRegion)
		}
		q.used = max(0, q.used-p.Return) + call.Charge
		q.expires = p.End.Add(quotaTTL)
		allowance := quotaAllowance(p.Limit, p.Share, q.baseTotal, q.baseRegion)
		g = min(g, allowance-q.used)
		if call.NeedBase && q.baseAt == 0 {
			g = 0
		}
		next[i] = q
		rep.Counters[i].Allowance = allowance
	}
	if g < call.Min || g < 0 {
		g = 0
	}
	rep.Granted = g
	for i, p := range call.Periods {
		q := next[i]
		q.used += g
		sh.quotas[memQuotaKey(call.Key, p)] = &q
		rep.Counters[i].Used = q.used
		if q.baseAt > 0 {
			rep.Counters[i].BaseAt = time.UnixMicro(q.baseAt)
		}
	}
	return rep, nil
}

func memQuotaKey(key string, p QuotaPeriod) string {
	return key + " " + string(p.Unit) + " " + strconv.FormatInt(p.Start.Unix(), 10)
}
