package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/store"
)

var _ store.QuotaStore = (*Store)(nil)

// QuotaKey is the Redis key of key's counter of the period of unit that
// starts at start: a hash on the same Cluster slot as its bucket.
func (s *Store) QuotaKey(key string, unit period.Unit, start time.Time) string {
	return s.BucketKey(key) + ":q:" + string(unit) + ":" + strconv.FormatInt(start.Unix(), 10)
}

// LeaseQuota implements store.QuotaStore with one call of lua/quota.lua.
func (s *Store) LeaseQuota(ctx context.Context, call store.QuotaCall) (store.QuotaReply, error) {
	if err := call.Validate(); err != nil {
		return store.QuotaReply{}, err
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
			p.End.Add(store.QuotaTTL).UnixMilli(), total, reg, at)
	}
	res, err := quotaScript.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return store.QuotaReply{}, fmt.Errorf("%w: redis quota lease %q: %w", errorKind(err), call.Key, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 1+4*len(call.Periods) {
		return store.QuotaReply{}, fmt.Errorf("%w: quota reply is %T of %d, want %d integers", store.ErrStoreUnavailable, res, len(parts), 1+4*len(call.Periods))
	}
	n := make([]int64, len(parts))
	for i, p := range parts {
		v, ok := p.(int64)
		if !ok {
			return store.QuotaReply{}, fmt.Errorf("%w: quota reply element %d is %T, want an integer", store.ErrStoreUnavailable, i, p)
		}
		n[i] = v
	}
	rep := store.QuotaReply{Granted: n[0]}
	for i := range call.Periods {
		c := store.QuotaCounter{Used: n[1+4*i], Allowance: n[2+4*i], Ended: n[4+4*i] == 1}
		if bt := n[3+4*i]; bt > 0 {
			c.BaseAt = time.UnixMicro(bt)
		}
		rep.Counters[i] = c
	}
	if rep.Granted < 0 || rep.Granted > call.Want {
		return store.QuotaReply{}, fmt.Errorf("%w: quota granted %d of %d asked", store.ErrStoreUnavailable, rep.Granted, call.Want)
	}
	return rep, nil
}
