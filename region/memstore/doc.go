// Package memstore is the region's store in process: every store contract
// (region/store) on maps behind sharded mutexes, for a single process
// (the embedded daemon, tests and examples), and the reference the Redis
// store's scripts are held to by storetest's randomized equivalence test.
//
// Time: the store's clock is the clock.Clock given to New; a test drives
// refill, expiry and debt credit by advancing a clock.Manual. Safe for
// concurrent use.
package memstore
