package redisstore

import (
	"github.com/quotaplatform/quota/region/store"
	"github.com/redis/go-redis/v9"
)

// Scripter is the part of go-redis the Store uses. *redis.Client,
// *redis.ClusterClient and *redis.Ring all satisfy it. Configure the client
// with ContextTimeoutEnabled so that the Limiter's hard store timeout
// applies to the socket as well.
type Scripter interface {
	redis.Scripter
}

// Store keeps each key's regional bucket in one Redis hash, updated by
// one Lua script (lua/lease.lua) per call. An error reply about the key
// (the bucket's Redis key holds another type, the script refused its
// arguments) wraps store.ErrStoreRejected; connection errors, timeouts and
// replies that say Redis cannot serve (LOADING, READONLY, CLUSTERDOWN…)
// wrap store.ErrStoreUnavailable (store.IsTransient). Safe for concurrent
// use.
type Store struct {
	rdb    Scripter
	prefix string
}

var _ store.Store = (*Store)(nil)

// New returns a store over rdb. prefix starts every bucket name
// ("quota:" when empty); the API key goes in a hash tag after it.
func New(rdb Scripter, prefix string) *Store {
	if prefix == "" {
		prefix = "quota:"
	}
	return &Store{rdb: rdb, prefix: prefix}
}

// BucketKey is the Redis key of key's bucket.
func (s *Store) BucketKey(key string) string { return s.prefix + "{" + key + "}" }

// flagArg is a boolean argument of a script (store.RequestCall.Deny,
// store.QuotaCall.NeedBase): "1" or "0".
func flagArg(deny bool) int {
	if deny {
		return 1
	}
	return 0
}

// errorKind is the class of a failed script call: store.ErrStoreUnavailable
// when the error says Redis cannot serve now (store.IsTransient), else
// store.ErrStoreRejected: an error reply about this key (WRONGTYPE, the
// script's own refusal).
func errorKind(err error) error {
	if store.IsTransient(err) {
		return store.ErrStoreUnavailable
	}
	return store.ErrStoreRejected
}
