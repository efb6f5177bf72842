package region

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/lease.lua
var leaseLua string

var leaseScript = redis.NewScript(leaseLua)

// RedisScripter is the part of go-redis the RedisStore uses. *redis.Client,
// *redis.ClusterClient and *redis.Ring all satisfy it. Configure the client
// with ContextTimeoutEnabled so that the Limiter's hard store timeout
// applies to the socket as well.
type RedisScripter interface {
	redis.Scripter
}

// RedisStore keeps each key's regional bucket in one Redis hash, updated by
// one Lua script (lua/lease.lua) per call. An error reply about the key (the
// bucket's Redis key holds another type, the script refused its arguments)
// wraps ErrStoreRejected; connection errors, timeouts and replies that say
// Redis cannot serve (LOADING, READONLY, CLUSTERDOWN…) wrap
// ErrStoreUnavailable (isTransient).
type RedisStore struct {
	rdb    RedisScripter
	prefix string
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a store over rdb. prefix starts every bucket name
// ("quota:" when empty); the API key goes in a hash tag after it.
func NewRedisStore(rdb RedisScripter, prefix string) *RedisStore {
	if prefix == "" {
		prefix = "quota:"
	}
	return &RedisStore{rdb: rdb, prefix: prefix}
}

// BucketKey is the Redis key of key's bucket.
func (s *RedisStore) BucketKey(key string) string { return s.prefix + "{" + key + "}" }

// Lease implements Store with one EVALSHA (EVAL on a script cache miss).
func (s *RedisStore) Lease(ctx context.Context, req LeaseRequest) (LeaseReply, error) {
	if err := req.validate(); err != nil {
		return LeaseReply{}, err
	}
	res, err := leaseScript.Run(ctx, s.rdb, []string{s.BucketKey(req.Key)},
		strconv.FormatFloat(req.Rate, 'g', -1, 64),
		strconv.FormatFloat(req.Capacity, 'g', -1, 64),
		req.Want, req.Min, req.Return, req.Spread, req.Debt, req.Demand, req.Grace.Microseconds()).Result()
	if err != nil {
		kind := ErrStoreRejected // an error reply about this key (WRONGTYPE, the script's own)
		if isTransient(err) {
			kind = ErrStoreUnavailable
		}
		return LeaseReply{}, fmt.Errorf("%w: redis lease %q: %w", kind, req.Key, err)
	}
	return decodeLeaseReply(res)
}

func decodeLeaseReply(res any) (LeaseReply, error) {
	parts, ok := res.([]any)
	if !ok || len(parts) != 4 {
		return LeaseReply{}, fmt.Errorf("%w: lease reply is %T, want a 4-element array", ErrStoreUnavailable, res)
	}
	granted, ok1 := parts[0].(int64)
	tokStr, ok2 := parts[1].(string)
	micros, ok3 := parts[2].(int64)
	demand, ok4 := parts[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return LeaseReply{}, fmt.Errorf("%w: lease reply has types %T %T %T %T", ErrStoreUnavailable, parts[0], parts[1], parts[2], parts[3])
	}
	tokens, err := strconv.ParseFloat(tokStr, 64)
	if err != nil {
		return LeaseReply{}, fmt.Errorf("%w: lease reply tokens %q: %w", ErrStoreUnavailable, tokStr, err)
	}
	return LeaseReply{Granted: granted, Tokens: tokens, StoreTime: time.UnixMicro(micros), DemandTotal: demand}, nil
}

// validate checks a request before a store sees it. Its errors wrap
// ErrStoreRejected and the sentinel of the field at fault.
func (r LeaseRequest) validate() error {
	bad := func(kind error, format string, args ...any) error {
		return fmt.Errorf("%w: %w: "+format, append([]any{ErrStoreRejected, kind}, args...)...)
	}
	switch {
	case r.Key == "":
		return bad(ErrInvalidKey, "lease request key is empty")
	case !(r.Rate > 0) || math.IsInf(r.Rate, 1):
		return bad(ErrInvalidPlan, "lease request rate must be a finite number > 0, got %v", r.Rate)
	case !(r.Capacity > 0) || math.IsInf(r.Capacity, 1):
		return bad(ErrInvalidPlan, "lease request capacity must be a finite number > 0, got %v", r.Capacity)
	case r.Want < 0 || r.Min < 0 || r.Return < 0 || r.Debt < 0 || r.Demand < 0:
		return bad(ErrInvalidCost, "lease request want %d, min %d, return %d, debt %d and demand %d must not be negative",
			r.Want, r.Min, r.Return, r.Debt, r.Demand)
	case r.Grace < 0:
		return bad(ErrInvalidCost, "lease request grace must not be negative, got %v", r.Grace)
	case r.Spread < 1:
		return bad(ErrInvalidCost, "lease request spread must be at least 1, got %d", r.Spread)
	}
	return nil
}

//go:embed lua/slots.lua
var slotsLua string

var slotsScript = redis.NewScript(slotsLua)

var _ SlotStore = (*RedisStore)(nil)

// SlotKey is the Redis key of key's concurrency slots: a sorted set on the
// same Cluster slot as its bucket.
func (s *RedisStore) SlotKey(key string) string { return s.BucketKey(key) + ":slots" }

// AcquireSlot implements SlotStore with one call of lua/slots.lua.
func (s *RedisStore) AcquireSlot(ctx context.Context, req SlotRequest) (SlotReply, error) {
	if err := req.validate(); err != nil {
		return SlotReply{}, err
	}
	parts, err := s.slots(ctx, req.Key, "acquire", req.ID, req.Limit, req.TTL.Milliseconds())
	if err != nil {
		return SlotReply{}, err
	}
	rep := SlotReply{Acquired: parts[0] == 1, Held: int(parts[1])}
	if rep.Acquired {
		rep.TTL = time.Duration(parts[3]-parts[2]) * time.Millisecond
	}
	return rep, nil
}

// ReleaseSlot implements SlotStore with one call of lua/slots.lua.
func (s *RedisStore) ReleaseSlot(ctx context.Context, key, id string) (bool, error) {
	if err := (SlotRequest{Key: key, ID: id, Limit: 1, TTL: time.Millisecond}).validate(); err != nil {
		return false, err
	}
	parts, err := s.slots(ctx, key, "release", id, 0, 0)
	if err != nil {
		return false, err
	}
	return parts[0] == 1, nil
}

// slots runs lua/slots.lua and decodes its four integers.
func (s *RedisStore) slots(ctx context.Context, key, op, id string, limit int, ttlMillis int64) ([4]int64, error) {
	var out [4]int64
	res, err := slotsScript.Run(ctx, s.rdb, []string{s.SlotKey(key)}, op, id, limit, ttlMillis).Result()
	if err != nil {
		kind := ErrStoreRejected
		if isTransient(err) {
			kind = ErrStoreUnavailable
		}
		return out, fmt.Errorf("%w: redis slots %s %q: %w", kind, op, key, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 4 {
		return out, fmt.Errorf("%w: slots reply is %T, want a 4-element array", ErrStoreUnavailable, res)
	}
	for i, p := range parts {
		n, ok := p.(int64)
		if !ok {
			return out, fmt.Errorf("%w: slots reply element %d is %T, want an integer", ErrStoreUnavailable, i, p)
		}
		out[i] = n
	}
	return out, nil
}

//go:embed lua/request.lua
var requestLua string

var requestScript = redis.NewScript(requestLua)

var _ RequestStore = (*RedisStore)(nil)

// RequestKey is the Redis key of the record of key's request id: a hash on
// the same Cluster slot as its bucket.
func (s *RedisStore) RequestKey(key, id string) string { return s.BucketKey(key) + ":req:" + id }

// Request implements RequestStore with one call of lua/request.lua, which
// writes the bucket and the request's record together.
func (s *RedisStore) Request(ctx context.Context, req RequestCall) (RequestReply, error) {
	if err := req.validate(); err != nil {
		return RequestReply{}, err
	}
	res, err := requestScript.Run(ctx, s.rdb, []string{s.BucketKey(req.Key), s.RequestKey(req.Key, req.ID)},
		req.Op.String(),
		strconv.FormatFloat(req.Rate, 'g', -1, 64),
		strconv.FormatFloat(req.Capacity, 'g', -1, 64),
		req.Cost, req.Horizon.Milliseconds(), req.Grace.Microseconds(), flagArg(req.Deny)).Result()
	if err != nil {
		kind := ErrStoreRejected
		if isTransient(err) {
			kind = ErrStoreUnavailable
		}
		return RequestReply{}, fmt.Errorf("%w: redis request %s %q: %w", kind, req.Op, req.Key, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 7 {
		return RequestReply{}, fmt.Errorf("%w: request reply is %T, want a 7-element array", ErrStoreUnavailable, res)
	}
	var n [7]int64
	for i, p := range parts {
		if i == 5 {
			continue
		}
		v, ok := p.(int64)
		if !ok {
			return RequestReply{}, fmt.Errorf("%w: request reply element %d is %T, want an integer", ErrStoreUnavailable, i, p)
		}
		n[i] = v
	}
	tokStr, ok := parts[5].(string)
	if !ok {
		return RequestReply{}, fmt.Errorf("%w: request reply element 5 is %T, want a string", ErrStoreUnavailable, parts[5])
	}
	tokens, err := strconv.ParseFloat(tokStr, 64)
	if err != nil || n[0] < 0 || n[0] > int64(RequestConflict) {
		return RequestReply{}, fmt.Errorf("%w: request reply %v", ErrStoreUnavailable, parts)
	}
	return RequestReply{Status: RequestStatus(n[0]), Allowed: n[1] == 1, Charged: n[2], Refunded: n[3], Cost: n[4],
		Tokens: tokens, StoreTime: time.UnixMicro(n[6])}, nil
}

// flagArg is a boolean argument of a script (RequestCall.Deny,
// QuotaCall.NeedBase): "1" or "0".
func flagArg(deny bool) int {
	if deny {
		return 1
	}
	return 0
}
