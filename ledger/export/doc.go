// Package export reads the ledger period by period for every key: one Row
// per key and period — a UTC hour, day or month, or with CalendarPlan the
// hour, day or month of the key's plan's calendar (its time zone and
// anchor day, as its quotas count them) — with allowed, refunded, charged,
// rejected and degraded cost, whether the period is complete (it has ended and every
// process sent its final report for every window in it), and what it
// bills: the net (allowed + charged − refunded) with a negative net carried
// forward to the key's next periods, never billed below zero (Row, Carry;
// [idempotency] in docs/design.md). Credit is carried, not floored per
// row, because a refund lands in the window it is made in, but never more
// than the key was billed before: the rest (Row.Uncredited) can only come
// from a forged report or one written before the reconciler cut refunds to
// their row's spend. It streams them as CSV or NDJSON
// (Encoder) and serves GET /v1/usage/export to billing tokens (Handler).
// The sinks (ledger/sink) send Row.Billed.
//
// Determinism: a row's figures are a function of the ledger alone. The
// carry runs over each key's whole history in the ledger, before the
// Query's From too, so the same ledger exports the same figures whatever
// the range asked for, and a rerun gives the same figures. Detaching a
// month (retention) that leaves a credit open for a key changes that
// key's later figures: keep the months a credit spans attached. A sink's
// export (Query.Carry) starts each key from the carry the sink stored
// (Row.Before at a period start, billing_sink_carries) instead: the same
// figures while the rows it sums are unchanged, and the sink's, not what
// is left, once retention removed them.
//
// Periods on the plan calendar are cut in Postgres by the same arithmetic
// as package period (migrations/008's quota_period_bounds), per key; the
// carry runs over each key's own periods.
// With Query.Frozen the periods a sink recorded keep their bounds, and the
// plan calendar cuts only the windows outside them (a plan change never
// re-cuts what was sent).
//
// Memory and time: Exporter.Export reads the keys in pages, each page a
// separate bounded query (at most Config.PageRows rows, under
// Config.StatementTimeout), buffers one page, hands it to the caller and
// reuses the buffer: memory is bounded by one page whatever the number of
// keys, and no single query lasts as long as the export. A slow reader
// slows the next page, never a running query. A page's query also reads
// its keys' periods before From (for the carry), by the same key range in
// every earlier month partition: its cost grows with the months the
// ledger keeps attached, its rows and memory do not. With Query.Carry it
// reads a key's windows only from its stored carry on (the page's earliest
// carry bounds the index scans and prunes older partitions), so a sink's
// pass costs the periods it exports, not the key's history.
//
// Order and resumption: rows come ordered by key, then period. A Cursor
// names a row (key, period start); a Query resumed from it yields exactly
// the rows after it. Query.After resumes after a whole key.
//
// Time enters as Query.Now, which decides whether a period has ended; the
// package reads no clock. Exporter and Handler are safe for concurrent use
// and start no goroutines. It does not write the ledger, and does not
// parse flags (cmd/reconciler does).
package export
