// Package store is the contract between the lease engine and a region's
// shared store: the calls a region.Limiter makes (Store.Lease, and the
// optional QuotaStore, RequestStore and SlotStore), their arguments and
// replies, the store's own rules (bucket expiry, quota counter lifetime),
// and how a store's errors are classified (ErrStoreRejected,
// ErrStoreUnavailable, IsTransient).
//
// It holds no implementation: region/memstore keeps the buckets in
// process, region/redisstore in Redis, and region/store/storetest is the
// conformance suite both pass. It imports nothing of region, so that a
// store depends on the contract alone.
//
// Time: every operation runs on the store's own clock (Redis' TIME, or the
// in-process store's clock.Clock) and reports it (StoreTime), so caller
// clock skew cannot change admission (docs/design.md [store-clock]).
// Every type is a value; implementations are safe for concurrent use.
package store
