// Package ledger carries exact per-window usage from limiter processes to the
// billing ledger.
//
// On the limiter side, a Reporter implements limit.UsageSink: it adds the
// Limiter's usage deltas into cumulative counters per (key, accounting
// window) for this process and publishes them as Reports to a JetStream
// stream, many to a message (EncodeBatch) — periodically, as a final report
// once a window has ended (plus a grace period), and as a final report for
// everything on Close. Publishing
// happens on the Reporter's own goroutine; Record only updates memory under a
// mutex, so a decision never waits for NATS. While NATS is unreachable,
// reports go to a Spool: a bounded, durable local file that keeps only the
// latest report per (key, window, process), drained when NATS returns.
//
// Memory is bounded by Config.MaxKeys (key, window) counters: past it the
// Reporter flushes at once. It reports (or spools) what changed, frees the
// windows whose final report was accepted, and reports final, then frees,
// the least recently recorded others, down to MaxKeys/2; a later delta for
// a freed window goes to a row of its own. Usage is never dropped: it stays
// in memory past MaxKeys only while neither JetStream nor the spool accepts
// it.
//
// Reports are cumulative and carry a per-(process, key, window) sequence
// number, so the consumer side (package ledger/reconcile) can apply them
// idempotently: a duplicated, redelivered or reordered report never counts
// twice (docs/design.md [reconciliation]). Package ledger/billing answers
// billing queries from the ledger.
//
// The package knows nothing of Postgres, HTTP or fx.
//
// Time: the Reporter takes a clock.Clock in Config.Clock (nil is
// clock.System()). It reads it to decide when a window's final report is due
// and when Retention has passed, and its loop (Start) reports on a ticker
// from Clock.NewTicker every ReportInterval; with a clock.Manual, the loop
// reports when the clock is advanced, and Manual.BlockUntil(1) returns once
// the loop waits on its ticker. Window boundaries come from the Limiter's
// usage (region.WindowStart) and Config.Window, not from this clock.
// PublishTimeout is measured on the system clock: it bounds waiting on
// JetStream, which no manual clock moves.
package ledger
