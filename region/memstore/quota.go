package memstore

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

var _ store.QuotaStore = (*Store)(nil)

// counter is one quota counter (redisstore's lua/quota.lua hash).
type counter struct {
	used, baseTotal, baseRegion int64
	baseAt                      int64 // unix µs; 0 = none
	expires                     time.Time
}

// LeaseQuota implements store.QuotaStore, as redisstore's lua/quota.lua does.
func (s *Store) LeaseQuota(ctx context.Context, call store.QuotaCall) (store.QuotaReply, error) {
	if err := call.Validate(); err != nil {
		return store.QuotaReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.QuotaReply{}, err
	}
	now := s.clock.Now()
	sh := s.lockShard(call.Key, now)
	defer sh.mu.Unlock()
	if sh.quotas == nil {
		sh.quotas = make(map[string]*counter)
	}
	var next [store.MaxQuotaPeriods]counter
	var rep store.QuotaReply
	g := call.Want
	for i, p := range call.Periods {
		if !now.Before(p.End.Add(store.QuotaTTL)) {
			rep.Counters[i].Ended = true
			g = 0
			continue
		}
		q := counter{}
		if have := sh.quotas[counterKey(call.Key, p)]; have != nil && now.Before(have.expires) {
			q = *have
		}
		if b := p.Base; b != nil && b.AsOf.UnixMicro() > q.baseAt {
			// A base below zero (refunds past what was spent) would lift
			// the allowance past the quota: spend is never negative, and
			// no region spent more than the fleet.
			total := max(0, b.Total)
			q.baseTotal, q.baseRegion, q.baseAt = total, min(max(0, b.Region), total), b.AsOf.UnixMicro()
			q.used = max(q.used, q.baseRegion)
		}
		q.used = max(0, q.used-p.Return) + call.Charge
		q.expires = p.End.Add(store.QuotaTTL)
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
		if rep.Counters[i].Ended {
			continue
		}
		q := next[i]
		q.used += g
		sh.quotas[counterKey(call.Key, p)] = &q
		rep.Counters[i].Used = q.used
		if q.baseAt > 0 {
			rep.Counters[i].BaseAt = time.UnixMicro(q.baseAt)
		}
	}
	return rep, nil
}

func counterKey(key string, p store.QuotaPeriod) string {
	return key + " " + string(p.Unit) + " " + strconv.FormatInt(p.Start.Unix(), 10)
}

// quotaAllowance is base region + share × (limit − base total), floored,
// as redisstore's lua/quota.lua computes it.
func quotaAllowance(limit int64, share float64, baseTotal, baseRegion int64) int64 {
	return baseRegion + int64(math.Floor(share*float64(limit-baseTotal)))
}
