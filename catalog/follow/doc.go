// Package follow follows one NATS JetStream key-value bucket: it reads the
// bucket's whole state, then hands over each change as the server pushes
// it, and starts again with a whole read after a failure or a NATS
// reconnection. Package catalog follows the catalogue bucket with it into
// memory, and package planmirror into the ledger's plan tables.
//
// What it owns: the watch (binding through the Handler, the initial read,
// the end-of-initial-values marker, bursts), noticing reconnections, and
// the retry loop. What it does not own: the connection (the caller passes a
// jetstream.JetStream), the bucket (Handler.Bind opens or creates it), and
// what an entry means (the Handler decodes it).
//
// Ordering: within one watch the Handler sees the whole read, then Loaded,
// then the pushed changes, each in bucket revision order. A new watch
// starts with a new whole read, so a Handler throws away a half-done read
// in Restart.
//
// Concurrency and time: Run is one goroutine (the caller's) and calls the
// Handler from it alone; Resync is safe for concurrent use. Time enters as
// the retry interval and ReconnectCheck, on the wall clock: the watch is
// pushed by the server, so there is no batching to test on a fake clock.
package follow
