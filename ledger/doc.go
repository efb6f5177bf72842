// Package ledger reports exact per-window usage from limiter processes over
// JetStream and reconciles it into a Postgres ledger for billing.
package ledger
