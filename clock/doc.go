// Package clock is the one time source of the quota libraries (region,
// gossip, ledger): Clock tells the time and makes tickers and timers.
//
// System is the real clock. Manual is a clock for tests that moves only when
// told to; its tickers and timers fire as it moves, so a test drives a
// background loop (a sweep, a gossip tick, a report flush) by advancing time
// instead of sleeping, and awaits that a loop is waiting with BlockUntil.
//
// A library takes a Clock in its Config, where nil means System. Whether a
// library may use a cheaper reading of the system clock (region's coarse
// decision clock) is decided by that nil, never by inspecting a Clock's type.
package clock
