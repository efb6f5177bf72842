// Package sink sends each closed period's usage per key to a billing sink
// as CloudEvents, records what it sent in Postgres (billing_sink_events,
// migration 004), and reports the difference between the ledger and each
// sink.
//
// What a period bills is export.Row.Billed: the net (allowed + charged −
// refunded) less the credit carried in from the key's earlier periods,
// never negative; a negative net is carried forward to the key's next
// periods ([idempotency] in docs/design.md). Every event carries the
// billed figure and the figures it comes from (allowed, refunded, charged,
// net, carried in and out; no spent, as on every billing surface), and
// billing_sink_events.billed and acked_billed hold billed
// figures (rows from before net billing hold the gross allowed cost,
// which was then the billed figure, so corrections are computed against
// what was sent either way).
//
// Exactly-once at the receiver: an event's id is derived from (key,
// period start, granularity) and, for a correction, the revision, so a
// resend carries the id the receiver has seen and is dropped by a
// receiver that deduplicates on id (OpenMeter, a JetStream stream's
// Nats-Msg-Id window). An id never carries two payloads: each event is
// recorded 'pending' with its exact data (and a Framer's frame: Stripe's
// customer, value, timestamp and identifier) before it is sent, its
// answer recorded after, and a pending or failed event is sent again with
// exactly its recorded payload before anything newer of its period. Past
// Config.ResendWindow from its first attempt (Stripe: 23 h) an
// unacknowledged event is held for a person instead. A period is sent once
// it is complete (ended, every final report in); a later change of its
// figures (a late report, or a change of an earlier period that changes
// the credit carried in) sends one correction with the next revision,
// whose data names the event it replaces and the change in the billed
// figure (billed_delta, which earlier releases also sent as spent_delta:
// meter on it to sum corrections correctly; it is negative when a late
// refund lowers a period).
//
// SyncStripe sends the same periods to a Stripe billing meter through
// the Stripe Sender (sink "stripe:<meter>"): keys are mapped to customers
// from an instant on (stripe_customer_mappings, migration 015), a period
// to the customer mapped at its last instant and a correction to the one
// its first event named; keys without one are skipped and counted apart, a
// correction is a delta meter event, the identifier hashes the payload
// (so Stripe's duplicate-identifier answer means delivered), and an event
// whose customer's invoice is already finalized is stamped with the time
// it is sent, landing on the current invoice.
//
// Periods are UTC's, or each key's plan's with Config.Calendar
// export.CalendarPlan (Report and KeyDifferences take the same calendar),
// where the periods a sink recorded keep their bounds (export.Query.Frozen)
// and a plan change cuts only what follows them.
//
// A Publisher run holds a Postgres advisory lock on its sink's name
// (ErrRunning for a second run), refuses settings other than the sink's
// first run recorded (billing_sinks, migration 014; ErrSinkChanged), reads
// the ledger with export.Exporter (page by page) over its range,
// Config.Lookback before it and back to the sink's watermark and oldest
// event to resend, and sends
// each page's events in batches: recorded pending in one round trip, sent
// (one request per batch for a BatchFramer: Stripe's v2 meter event
// stream, StripeConfig.Stream, 100 events a request; else one at a time),
// each answer recorded; it stops at the first batch the sink refuses (the
// sink is down: the next run catches up) with exactly the refused events
// recorded failed. Retain removes the rows a sink acknowledged of old
// periods (retain.go, migration 019), which runs then never send again. With Config.Incremental
// (continuous passes) a run after the sink's first reads only the keys
// that may have changed since its checkpoint (incremental.go, migration
// 017), each from the carry a pass stored for it (billing_sink_carries,
// migration 021: its cumulative net, low and billed as of a period start)
// rather than from its first report, and computes the differences from the
// rows it read. A carry is deleted when a row of its key before it is
// written again, and outlives retention's removal of the rows it sums.
// A run sends through an outbox and writes its other bookkeeping through
// books (effects.go); Preview runs the same code with the two swapped for
// ones that list PlannedEvents and write nothing, each statement in a
// read-only transaction.
// KeyDifferences compares the
// ledger and a sink key by key; the held and unsent gauges count the
// sink's whole table. Time enters as Run's now. It starts no
// goroutines. It does not parse flags (cmd/reconciler does).
package sink
