// Package participant makes a Go process a full member of a region's limiter
// fleet, in process: the decision runs inside the caller's own service (no
// network hop on the check path), on leases from the region's Redis, with the
// region's gossiped share of every key, the plans and endpoint costs pushed
// through the catalogue bucket, memberlist's live process count, and exact
// usage reported to the ledger stream (spooled to disk while NATS is away).
//
// The daemon (cmd/regional-limiter) is built on this package: what a
// participant starts, links and stops, and in which order, is written here
// once.
//
//	p, err := participant.Open(ctx, participant.DefaultOptions())
//	…
//	defer p.Close(ctx)
//	mw, err := p.Middleware(httplimit.Config{Key: …})
//	http.ListenAndServe(addr, mw(mux))
//
// What it owns: the region's store client (unless Options.Store is given),
// the NATS connection or embedded server (unless Options.NATS is given), the
// catalogue watch and its last-known-good cache, the gossip node, the
// memberlist membership, the ledger reporter and its spool, and the limiter's
// background loop. What it does not own: an HTTP server, tokens, flags or
// any dependency-injection framework; the caller serves its own routes
// (Middleware, Health, ReadyHandler help) and parses its own configuration.
//
// Lifecycle: New builds every part and connects (never blocking on an
// unreachable Redis or NATS; an embedded NATS server starts here) but
// starts none of the parts' loops; Start starts them in order;
// Open is New then Start. Close stops them in the reverse order, so that the
// limiter drains (returns its leases and flushes its last usage into the
// reporter and the gossip node) before the reporter sends its final reports,
// and the connections close last. Close may follow New without Start.
//
// Concurrency and time: every method is safe for concurrent use. The limiter
// decides on its own coarse clock unless Options.Clock is set (see Options);
// the goroutines are the parts' own, each stopped and waited for by Close.
package participant
