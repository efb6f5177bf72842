// Package billing answers usage queries from the Postgres ledger: the totals
// of one key over a time range and a row per hour, day or accounting window,
// each flagged degraded (some cost was allowed while the store was
// unavailable) and complete (every process sent its final report). It serves
// them over HTTP (GET /v1/usage) as JSON or CSV.
//
// A window belongs to the bucket and range that hold its window_start
// (UTC); ranges are half-open [from, to).
package billing
