// Package reconcile moves usage reports from the JetStream stream into the
// Postgres ledger (table usage_reports, see migrations/), as decided in
// (docs/design.md [reconciliation]).
//
// A Reconciler reads the stream through a durable pull consumer, gathers a
// batch (BatchSize reports or BatchInterval, whichever comes first), hands it
// to a Store in one transaction, and acknowledges the batch's messages only
// after the transaction committed. While the Store fails (Postgres down) it
// retries the same batch with exponential backoff and acknowledges nothing.
//
// The Writer (the Postgres Store) merges each report into its row
// (key, window_start, process_id): spent, rejected and degraded take the
// greatest value, leased and seq come from the report with the highest seq,
// and final sticks once true. Reports are cumulative, so a redelivered,
// duplicated or reordered report never counts twice.
//
// Run owns one goroutine (the caller's); the package starts no other.
//
// Time: BatchInterval, the retry backoff and the idle check are measured on
// the system clock, as they pace waiting on JetStream and Postgres; there is
// no Config.Clock. Report times come from the reports themselves.
package reconcile
