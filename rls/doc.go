// Package rls serves Envoy's rate limit service protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from a
// region.Limiter, with limits written in envoyproxy/ratelimit's
// configuration YAML.
//
// What rls owns: reading and validating that YAML (Parse, Load; errors name
// the file, line and field), matching a request's descriptors against it
// (the most specific descriptor wins, as envoyproxy/ratelimit matches),
// turning each matched descriptor into a limiter key and a region.Plan
// (Key, Plans), the gRPC service itself (Service, NewGRPCServer, with
// bearer-token authentication of every method), its response headers and
// its Prometheus counters, a Watcher that reloads the files when they
// change, and the rules stored in the catalogue: PutDomain parses a
// domain's YAML (ParseDomain) before writing it to the catalogue
// (catalog.KindRLS, one entry per domain, pushed to every process), and
// WatchCatalog puts the catalogue's domains in force in a Rules on every
// push, a domain whose entry does not parse keeping its last good rules.
//
// What it does not own: deciding (a region.Limiter does: every matched
// descriptor is an ordinary key with leases, shares, gossip and ledger
// rows), the plan catalogue (Plans defers every key it does not own to
// another region.PlanResolver), flags, and the process's lifecycle (cmd/
// wires it with fx; rls never imports fx).
//
// Limits are token buckets, not envoyproxy/ratelimit's fixed windows:
// requests_per_unit n per unit is a region.Plan of rate n/unit per second
// and capacity n.
//
// Concurrency: a Service, a Rules and a Plans are safe for concurrent use;
// a Config is immutable once built. A Watcher's Run is its only goroutine;
// its callbacks run on that goroutine. WatchCatalog starts none: its
// callbacks run on the catalogue's watch goroutine (and once on the
// caller's). Time: the Watcher polls on the
// clock.Clock of its WatchConfig; nothing else in rls reads the clock.
package rls
