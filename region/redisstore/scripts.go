package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// bucketLua is the token bucket arithmetic: argument checks, refill,
// debt credit and expiry, as local functions that the scripts touching a
// bucket call. It is prepended to each of them, so that it is written
// once and every script is still one self-contained EVALSHA.
//
//go:embed lua/bucket.lua
var bucketLua string

var (
	//go:embed lua/lease.lua
	leaseLua string
	//go:embed lua/request.lua
	requestLua string
	//go:embed lua/quota.lua
	quotaLua string
	//go:embed lua/slots.lua
	slotsLua string
)

// The scripts, made once per process: a script's SHA is its text's, and
// stays the same for the process' life.
var (
	leaseScript   = redis.NewScript(bucketLua + leaseLua)
	requestScript = redis.NewScript(bucketLua + requestLua)
	quotaScript   = redis.NewScript(quotaLua)
	slotsScript   = redis.NewScript(slotsLua)
)
