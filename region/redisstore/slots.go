package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

var _ store.SlotStore = (*Store)(nil)

// SlotKey is the Redis key of key's concurrency slots: a sorted set on the
// same Cluster slot as its bucket.
func (s *Store) SlotKey(key string) string { return s.BucketKey(key) + ":slots" }

// AcquireSlot implements store.SlotStore with one call of lua/slots.lua.
func (s *Store) AcquireSlot(ctx context.Context, req store.SlotRequest) (store.SlotReply, error) {
	if err := req.Validate(); err != nil {
		return store.SlotReply{}, err
	}
	parts, err := s.slots(ctx, req.Key, "acquire", req.ID, req.Limit, req.TTL.Milliseconds())
	if err != nil {
		return store.SlotReply{}, err
	}
	rep := store.SlotReply{Acquired: parts[0] == 1, Held: int(parts[1])}
	if rep.Acquired {
		rep.TTL = time.Duration(parts[3]-parts[2]) * time.Millisecond
	}
	return rep, nil
}

// ReleaseSlot implements store.SlotStore with one call of lua/slots.lua.
func (s *Store) ReleaseSlot(ctx context.Context, key, id string) (bool, error) {
	if err := (store.SlotRequest{Key: key, ID: id, Limit: 1, TTL: time.Millisecond}).Validate(); err != nil {
		return false, err
	}
	parts, err := s.slots(ctx, key, "release", id, 0, 0)
	if err != nil {
		return false, err
	}
	return parts[0] == 1, nil
}

// slots runs lua/slots.lua and decodes its four integers.
func (s *Store) slots(ctx context.Context, key, op, id string, limit int, ttlMillis int64) ([4]int64, error) {
	var out [4]int64
	res, err := slotsScript.Run(ctx, s.rdb, []string{s.SlotKey(key)}, op, id, limit, ttlMillis).Result()
	if err != nil {
		return out, fmt.Errorf("%w: redis slots %s %q: %w", errorKind(err), op, key, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 4 {
		return out, fmt.Errorf("%w: slots reply is %T, want a 4-element array", store.ErrStoreUnavailable, res)
	}
	for i, p := range parts {
		n, ok := p.(int64)
		if !ok {
			return out, fmt.Errorf("%w: slots reply element %d is %T, want an integer", store.ErrStoreUnavailable, i, p)
		}
		out[i] = n
	}
	return out, nil
}
