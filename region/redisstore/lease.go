package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// Lease implements store.Store with one EVALSHA (EVAL on a script cache miss).
func (s *Store) Lease(ctx context.Context, req store.LeaseRequest) (store.LeaseReply, error) {
	if err := req.Validate(); err != nil {
		return store.LeaseReply{}, err
	}
	res, err := leaseScript.Run(ctx, s.rdb, []string{s.BucketKey(req.Key)},
		strconv.FormatFloat(req.Rate, 'g', -1, 64),
		strconv.FormatFloat(req.Capacity, 'g', -1, 64),
		req.Want, req.Min, req.Return, req.Spread, req.Debt, req.Demand, req.Grace.Microseconds()).Result()
	if err != nil {
		return store.LeaseReply{}, fmt.Errorf("%w: redis lease %q: %w", errorKind(err), req.Key, err)
	}
	return decodeLeaseReply(res)
}

func decodeLeaseReply(res any) (store.LeaseReply, error) {
	parts, ok := res.([]any)
	if !ok || len(parts) != 4 {
		return store.LeaseReply{}, fmt.Errorf("%w: lease reply is %T, want a 4-element array", store.ErrStoreUnavailable, res)
	}
	granted, ok1 := parts[0].(int64)
	tokStr, ok2 := parts[1].(string)
	micros, ok3 := parts[2].(int64)
	demand, ok4 := parts[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return store.LeaseReply{}, fmt.Errorf("%w: lease reply has types %T %T %T %T", store.ErrStoreUnavailable, parts[0], parts[1], parts[2], parts[3])
	}
	tokens, err := strconv.ParseFloat(tokStr, 64)
	if err != nil {
		return store.LeaseReply{}, fmt.Errorf("%w: lease reply tokens %q: %w", store.ErrStoreUnavailable, tokStr, err)
	}
	return store.LeaseReply{Granted: granted, Tokens: tokens, StoreTime: time.UnixMicro(micros), DemandTotal: demand}, nil
}
