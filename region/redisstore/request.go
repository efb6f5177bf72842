package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

var _ store.RequestStore = (*Store)(nil)

// RequestKey is the Redis key of the record of key's request id: a hash on
// the same Cluster slot as its bucket.
func (s *Store) RequestKey(key, id string) string { return s.BucketKey(key) + ":req:" + id }

// Request implements store.RequestStore with one call of lua/request.lua, which
// writes the bucket and the request's record together.
func (s *Store) Request(ctx context.Context, req store.RequestCall) (store.RequestReply, error) {
	if err := req.Validate(); err != nil {
		return store.RequestReply{}, err
	}
	res, err := requestScript.Run(ctx, s.rdb, []string{s.BucketKey(req.Key), s.RequestKey(req.Key, req.ID)},
		req.Op.String(),
		strconv.FormatFloat(req.Rate, 'g', -1, 64),
		strconv.FormatFloat(req.Capacity, 'g', -1, 64),
		req.Cost, req.Horizon.Milliseconds(), req.Grace.Microseconds(), flagArg(req.Deny)).Result()
	if err != nil {
		return store.RequestReply{}, fmt.Errorf("%w: redis request %s %q: %w", errorKind(err), req.Op, req.Key, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 7 {
		return store.RequestReply{}, fmt.Errorf("%w: request reply is %T, want a 7-element array", store.ErrStoreUnavailable, res)
	}
	var n [7]int64
	for i, p := range parts {
		if i == 5 {
			continue
		}
		v, ok := p.(int64)
		if !ok {
			return store.RequestReply{}, fmt.Errorf("%w: request reply element %d is %T, want an integer", store.ErrStoreUnavailable, i, p)
		}
		n[i] = v
	}
	tokStr, ok := parts[5].(string)
	if !ok {
		return store.RequestReply{}, fmt.Errorf("%w: request reply element 5 is %T, want a string", store.ErrStoreUnavailable, parts[5])
	}
	tokens, err := strconv.ParseFloat(tokStr, 64)
	if err != nil || n[0] < 0 || n[0] > int64(store.RequestConflict) {
		return store.RequestReply{}, fmt.Errorf("%w: request reply %v", store.ErrStoreUnavailable, parts)
	}
	return store.RequestReply{Status: store.RequestStatus(n[0]), Allowed: n[1] == 1, Charged: n[2], Refunded: n[3], Cost: n[4],
		Tokens: tokens, StoreTime: time.UnixMicro(n[6])}, nil
}
