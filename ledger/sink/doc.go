// Package sink sends each closed period's usage per key to a billing sink
// as CloudEvents, records what it sent in Postgres (billing_sink_events,
// migration 004), and reports the difference between the ledger and each
// sink.
//
// What a period bills is export.Row.Billed: the net (spent + charged −
// refunded) less the credit carried in from the key's earlier periods,
// never negative; a negative net is carried forward to the key's next
// periods ([idempotency] in docs/design.md). Every event carries the
// billed figure and the figures it comes from (spent, refunded, charged,
// net, carried in and out), and billing_sink_events.spent and acked_spent
// hold billed figures (rows from before net billing hold the gross spent,
// which was then the billed figure, so corrections are computed against
// what was sent either way).
//
// Exactly-once at the receiver: an event's id is derived from (key,
// period start, granularity) and, for a correction, the revision, so a
// resend carries the id the receiver has seen and is dropped by a
// receiver that deduplicates on id (OpenMeter, a JetStream stream's
// Nats-Msg-Id window). A period is sent once it is complete (ended, every
// final report in); a later change of its figures (a late report, or a
// change of an earlier period that changes the credit carried in) sends
// one correction with the next revision, whose data names the event it
// replaces and the change in the billed figure (billed_delta, also under
// its old name spent_delta: meter on it to sum corrections correctly; it
// is negative when a late refund lowers a period). An event the sink did
// not acknowledge is recorded as failed and sent again, unchanged, by the
// next run, before any newer revision of its period.
//
// SyncStripe sends the same periods to a Stripe billing meter through
// the Stripe Sender (sink "stripe:<meter>"): keys are mapped to customers
// in stripe_customers (migration 005), unmapped keys are skipped, a
// correction is a delta meter event with its own identifier, and periods
// older than Stripe's 35-day window are listed, not sent.
//
// A Publisher run reads the ledger with export.Exporter (page by page) and
// sends one event at a time; it stops at the first event the sink refuses
// (the sink is down: the next run catches up). Time enters as Run's now.
// Publisher is not safe for concurrent runs on one sink name: run one
// `reconciler events` per sink at a time (cron). It starts no goroutines.
// It does not parse flags (cmd/reconciler does).
package sink
