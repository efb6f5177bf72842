package store

import (
	"errors"
	"fmt"
	"strings"
)

// The classes of a store call's error (docs/design.md [degraded-mode]).
var (
	// ErrStoreUnavailable: the store failed or timed out. The Limiter never
	// returns it from Allow (it degrades instead); stores and tests use it.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrStoreRejected: the store answered, and refused one call for a
	// reason of its own: the call's arguments, or the key's data in the store
	// (a Redis error reply such as WRONGTYPE, or an error raised by the
	// script). It says nothing of the store's availability, so it does not
	// count toward the breaker: the key alone is decided in degraded mode
	// (docs/design.md [degraded-mode]). The Limiter never returns it from
	// Allow; stores return it.
	ErrStoreRejected = errors.New("store rejected the call")
)

// IsTransient reports whether a store call's error says that the store is
// unavailable, which the breaker measures (docs/design.md [degraded-mode]),
// rather than something about the call's key alone:
//
//   - ErrStoreRejected (a store refused this call: its arguments, the key's
//     data) is not transient; ErrStoreUnavailable is.
//   - A Redis error reply (an error with go-redis' RedisError method) is
//     transient only when its code says Redis cannot serve anyone now:
//     loading, a read-only replica, a cluster or master that is down, busy
//     with a script, out of memory, unable to persist, refusing clients, or
//     not letting this client in (unavailableCodes). Any other reply
//     (WRONGTYPE, an error raised by the script) is about the key.
//   - Everything else (connection errors, timeouts, a cancelled context, a
//     reply that does not decode) is transient.
//
// Unknown errors count as transient: wrongly opening the breaker degrades
// every key for a cooldown, which is safe; wrongly not opening it would let
// every miss wait for a store that does not answer.
func IsTransient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrStoreRejected):
		return false
	case errors.Is(err, ErrStoreUnavailable):
		return true
	}
	var reply redisReply
	if !errors.As(err, &reply) {
		return true
	}
	msg := reply.Error()
	if msg == "ERR max number of clients reached" {
		return true
	}
	code, _, _ := strings.Cut(msg, " ")
	return unavailableCodes[code]
}

// redisReply is an error reply from Redis, as go-redis returns one (its
// redis.Error), named here by its method so that the contract needs no
// Redis client.
type redisReply interface {
	error
	RedisError()
}

// unavailableCodes are the Redis error codes that say the server (or its
// cluster) cannot serve now, whatever the key.
var unavailableCodes = map[string]bool{
	"LOADING":     true, // loading its dataset after a restart
	"READONLY":    true, // a replica: the client reached the wrong node
	"CLUSTERDOWN": true,
	"MASTERDOWN":  true,
	"TRYAGAIN":    true, // a slot is moving
	"MOVED":       true, // redirections the client gave up following
	"ASK":         true,
	"NOREPLICAS":  true,
	"BUSY":        true, // another script is running too long
	"OOM":         true, // maxmemory reached: writes refused
	"MISCONF":     true, // cannot persist: writes refused
	"NOSCRIPT":    true, // the script cache was flushed under us
	"NOAUTH":      true, // credentials: every key fails alike
	"WRONGPASS":   true,
	"NOPERM":      true,
}

// rejected is a refusal of a call's arguments: it wraps ErrStoreRejected.
func rejected(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrStoreRejected}, args...)...)
}
