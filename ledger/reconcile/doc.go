// Package reconcile moves usage reports from the JetStream stream into the
// Postgres ledger (table usage_reports, see migrations/), as decided in
// (docs/design.md [reconciliation]).
//
// A Reconciler reads the stream through a durable pull consumer, gathers a
// batch (about BatchSize reports or BatchInterval, whichever comes first;
// a message is one JSON report or a batch of many, ledger.EncodingBatch),
// hands it to a Store in transactions of at most BatchSize reports, and
// acknowledges a message only after every report in it was committed (or
// dead-lettered); on the work-queue stream that acknowledgement removes it.
// While the Store fails transiently
// (Postgres down; see isTransient) it retries the same batch with
// exponential backoff, acknowledges nothing and is not Ready.
//
// No message can stop ingestion. Before writing, each message is checked
// (check): a body that is not a valid report, a figure beyond MaxCounter,
// or a region or process that differs from the subject (checkSubject) is
// rejected. When Postgres refuses a batch with a data or constraint error,
// the batch is split in halves until the refused reports are alone.
// Rejected and refused messages are recorded in usage_dead_letters
// (Store.DeadLetter) and then terminated; the others are written and acked.
// In a batch message each report is judged on its own: a refused report is
// a dead letter of its own (DeadLetter.Index) and the rest of its batch is
// written.
//
// When Postgres answers but will not take part of a batch now (a part
// waiting past WriterConfig.LockTimeout for a month partition held by
// another statement, a resource it lacks), the batch is split rather than
// retried whole, and a lone report that still fails is parked: its
// message is handed back to the stream for Config.ParkDelay and comes back
// alone. Only an unreachable Postgres makes the same batch retry whole. A
// batch in progress is exported (Metrics.BatchStarted) so that a stuck
// one raises an alert within a minute.
//
// A lost durable consumer (deleted, or its stream) is created again; Run is
// not Ready until it consumes from it.
//
// The Writer (the Postgres Store) writes a batch in contiguous primary-key
// ranges, each its own transaction on its own connection, at once
// (WriterConfig.Parallel, default 2), every transaction taking its rows
// in primary-key order. It merges each report into its row
// (key, window_start, region, process_id): the region is in the key, so
// that no region's reports merge into another's row, whatever process they
// name. Spent, rejected and degraded take the
// greatest value, leased and seq come from the report with the highest seq,
// and final sticks once true. Reports are cumulative, so a redelivered,
// duplicated or reordered report never counts twice. Report times are cut
// to what Postgres stores (whole microseconds, UTC) before a batch is
// merged: window starts that differ below the microsecond are one row.
//
// A Closer (reconciler serve --close-after) marks final the rows of
// processes that died without their final report, once they have been
// silent for CloserConfig.After past their window's end, so that their
// keys' periods complete and get billed (migration 009).
//
// Run owns one goroutine (the caller's), and so does Closer.Run. The
// Writer starts one goroutine per part of a batch beyond the first
// (WriterConfig.Parallel), for the duration of Write, and Run one that
// ends each gathering when BatchInterval passes on the clock; the package
// starts no other.
//
// Time: BatchInterval, the retry backoff, keeping a batch in progress, the
// idle check and the window of accepted report times are measured on
// Config.Clock (the system clock by default; tests pass a clock.Manual),
// and the Closer's passes on CloserConfig.Clock; Close takes its now.
// Only the bound on one consumer-info request is on the wall clock, as it
// bounds I/O. Report times come from the reports themselves.
package reconcile
