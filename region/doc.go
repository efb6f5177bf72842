// Package region decides, inside one API process, whether a request may spend
// cost against a key's limit in this process's region.
//
// A Limiter holds, per key, a lease of permits taken from the region's shared
// token bucket (a store.Store, the contract in region/store: redisstore in
// production, memstore for a single process). Decisions spend from the lease
// without I/O, allocation or a process-wide lock; only when a lease is
// exhausted, expired or invalidated does the Limiter make one store call,
// which returns unused permits and leases new ones atomically.
//
// What region owns: leasing (adaptive sizes, caps from the accuracy budget,
// TTLs), the clock offset to the store, degraded mode when the store fails,
// bounded per-key state, and per-window usage counters handed to a UsageSink.
// What it does not own: other regions (a ShareSource says what fraction of a
// key's global limit this region holds), membership (a ProcessCounter says how
// many processes share the region), the plan catalogue (a PlanResolver), and
// shipping usage anywhere (a UsageSink).
//
// Time (docs/design.md [store-clock]): the Limiter takes a clock.Clock in
// Config.Clock. It measures lease expiry, staleness, the breaker's cooldown
// and degraded refill as differences of that clock's readings, and Run's
// sweep and flush tickers come from it, so a test drives Run by advancing a
// clock.Manual. With Config.Clock nil (the default) the clock is the
// system's, read cheaply: while Run runs, decisions read a coarse clock Run
// advances every 500 µs (Limiter.CoarseClock reports it), and otherwise the
// monotonic clock alone. The store's clock is learned from lease replies, as
// an offset to the local wall clock, to place accounting windows;
// Config.ClockOffset shifts the local wall clock for skew tests. Token
// refill itself happens in the store, on the store's clock, so process clock
// skew cannot change admission.
//
// Plans (Plan): rate in [MinRate, MaxRate] cost units per second, capacity
// in [1, MaxCapacity]; costs up to the capacity and per-window usage counts
// are int64, exact. A bucket's expiry in the store is twice its time to
// fill, clamped to [1 s, store.MaxBucketTTL]. A plan also carries its semantics
// (docs/design.md [plan-semantics]): a failure policy (FailDegraded,
// FailOpen, FailClosed) for decisions while the store is unavailable; a
// mode (ModeLeased, or ModeExact: one atomic store call per
// decision, never over the region's part of the limit); a shadow flag
// (every check allowed, would-be rejections reported and counted); and a
// concurrency limit, whose slots Acquire and Release take and give back in
// the store (a store.SlotStore) for SlotTTL.
//
// Errors (docs/design.md [degraded-mode]): Allow returns an error only for
// bad input or a key without a plan. Store failures never reach the
// caller. An error that says the store is unavailable (a connection error,
// a timeout, a reply such as LOADING, READONLY or CLUSTERDOWN) counts toward
// the breaker, which degrades every key once it opens; an error about one
// key (store.ErrStoreRejected: a Redis key of the wrong type, arguments the
// script refused) does not: that key alone is decided from its degraded
// bucket, and tries the store again after BreakerCooldown. Stats counts
// both (BreakerFailures, KeyErrors).
//
// Structure: Limiter is the fast path and what is shared; each capability
// (leases, quotas, idempotency, slots, degraded mode, the sweeper, the plan
// cache) is a type that owns its state and its part of the store contract,
// and every store call goes through one generic storeCall (deadline,
// timing, metrics, tracing, breaker verdict, clock offset). Tests in
// owned_test.go hold these lines.
//
// Concurrency: every exported method of Limiter is safe for concurrent use.
// Per-key state lives in shards, each behind its own mutex; store calls for
// one key are serialised so that concurrent misses share one lease.
package region
