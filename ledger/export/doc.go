// Package export reads the ledger period by period for every key: one Row
// per (key, UTC day or month) with spent, rejected and degraded cost and
// whether the period is complete (it has ended and every process sent its
// final report for every window in it). It streams them as CSV or NDJSON
// (Encoder) and serves GET /v1/usage/export to billing tokens (Handler).
//
// Memory and time: Exporter.Export reads the keys in pages, each page a
// separate bounded query (at most Config.PageRows rows, under
// Config.StatementTimeout), buffers one page, hands it to the caller and
// reuses the buffer: memory is bounded by one page whatever the number of
// keys, and no single query lasts as long as the export. A slow reader
// slows the next page, never a running query.
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
