// Package planmirror mirrors the catalogue's plans and key assignments
// (package catalog's JetStream key-value bucket) into the Postgres ledger's
// quota_plans and quota_key_plans (migrations/008), so that billing can
// answer per plan period in SQL (quota_usage, GET /v1/usage/quotas; docs/design.md
// [quotas]).
//
// What it owns: a watch on the bucket (a catalog/follow Follower, as the
// limiters' catalogue has) and the writes to the two tables.
// It mirrors only what billing by period needs: a plan's quotas, time zone
// and anchor day, and each key's plan name; endpoint weights and rate
// limit service domains are skipped. What it does not own: the NATS
// connection and the Postgres pool (the caller passes them), the bucket
// (the control plane creates and writes it; the mirror only reads, so its
// NATS user needs read access to that bucket alone), and the schema
// (migrations/).
//
// Consistency: every row carries the bucket revision of the value it
// holds and changes only for a later one, so writes are idempotent, may
// come from several reconcilers at once, and never go backwards. A deletion
// leaves a tombstone row (deleted, with the deletion's revision), so that
// an older value replayed later cannot revive the entry. On start, and
// after any failure or NATS reconnection, the mirror reads the bucket's
// whole state and writes it in one transaction, tombstoning what the
// bucket no longer holds; then it applies each burst of pushed changes in
// one transaction, in revision order. An entry that does not decode or
// validate is skipped (logged with its kind and revision, never its name,
// which for an assignment is a customer's key): its previous row stays,
// as the limiters keep their previous copy.
//
// Concurrency and time: Run is the only goroutine (the caller's); Synced,
// Revision and WaitRevision are safe for concurrent use. Time enters as
// Config.RetryInterval and Config.WriteTimeout; updated_at is Postgres'
// now().
package planmirror
