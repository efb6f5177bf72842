// Package redisstore is the region's store in Redis (or a Redis Cluster):
// every store contract (region/store), each call one Lua script, embedded
// from lua/. The scripts that touch a token bucket (lua/lease.lua,
// lua/request.lua) are built at init from one shared part, lua/bucket.lua,
// so that the bucket arithmetic is written once; storetest's randomized
// equivalence test holds it to memstore's.
//
// Keys: every Redis key of one API key carries it in a hash tag after the
// store's prefix ("quota:{acct_1}", BucketKey), so a Redis Cluster keeps
// them on one slot. Every key written has an expiry.
//
// Time: the scripts read Redis' own TIME, never the caller's clock
// (docs/design.md [store-clock]). Safe for concurrent use.
package redisstore
