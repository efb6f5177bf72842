// Package catalog is the plan catalogue of the regional limiter: plans
// (name → rate, capacity and the plan's semantics: failure policy, mode,
// shadow flag, concurrency), key → plan assignments, endpoint cost
// weights, and the rules of Envoy's rate limit service (one entry per
// domain holding its envoyproxy/ratelimit YAML, KindRLS; package rls
// parses them). It implements limit.PlanResolver and limit.CostResolver.
//
// What it owns: the catalogue's in-memory copy, the NATS JetStream
// key-value bucket that carries it (one entry per plan, assignment, weight
// or domain), the watch that pushes every change to every process, and a
// last-known-good copy in a file so that a process restarted during a NATS
// outage keeps the catalogue. What it does not own: the NATS connection (the caller passes a
// jetstream.JetStream), authentication (writers pass an actor name), and the
// limiter (the caller registers it with Subscribe, and is told which keys'
// cached plans went stale).
//
// Resolution: a key's plan is its assignment; a key with no assignment uses
// the plan named "default"; where the bucket holds no "default" plan,
// Config.DefaultPlan (the built-in default) stands in, unless it is zero.
//
// History: every value in the bucket records who wrote it (the actor) and
// when; the bucket keeps Config.History revisions per entry, read back with
// History. The bucket's revision of the last applied change is the catalogue
// version (Version), for a metric.
//
// Concurrency and time: every method is safe for concurrent use; lookups
// take a read lock and never do I/O. Start starts the watch (a
// follow.Follower) and, with a cache file, the goroutine that saves it;
// Stop cancels both and waits for them. Writes are one KV put each and wait until
// this process's own watch has applied them, so a read after a write sees it.
package catalog
