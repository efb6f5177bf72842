// Package multiregion is the multi-region harness: it runs the real
// regional-limiter and reconciler binaries on loopback, three regions by
// default, each with its own redis-server, its own nats-server (the regions'
// servers joined by gateways, as operators deploy them, on the shipped
// configuration with its users and permissions: every daemon authenticates
// as its role, and one limiter is the control plane) and N limiter
// processes, plus Postgres and the reconciler, and drives them through the
// failure table of the design with a traffic generator that records every
// decision the clients saw.
//
// A Cluster is a value: Start(t, spec) builds the binaries (once per test
// binary), starts every process on free ports, and stops them all when the
// test ends. Several clusters may run in one test binary. Every link a fault
// needs to touch runs through a fault-injecting TCP proxy: toxiproxy (as a
// library) for limiter → Redis and limiter → NATS, and, in front of each
// region's NATS gateway port, a proxy of this package that carries the
// cross-region latency (80 ms round trip by default) and cuts a region off
// by the origin it reads from each gateway CONNECT (servers also dial the
// gateway URLs they learn, so cutting configured links alone would leak).
//
// Domain actions (KillRedis, SlowRedis, PartitionNATS, StopPostgres,
// CrashProcess, RollingRestart, ColdRestart, SkewClock, SetPlan,
// WaitConverged) act on the processes and links; every wait polls with a
// deadline, none sleeps as synchronisation. The traffic generator routes
// each region's calls as a load balancer does: to the limiters whose
// /readyz answered 200 at its last health check (every 100 ms), so that it
// finds a draining limiter by itself; processes the harness takes down
// (CrashProcess, RestartProcess, ColdRestart) it avoids at once.
//
// The scenarios are Go tests in this package. They are skipped unless
// QUOTA_MULTIREGION is "short" (the CI form, about nine minutes) or
// "full" (the on-demand form), and always under go test -short. With
// QUOTA_MULTIREGION_REPORT=path the run writes a Markdown report of every
// scenario's figures to path and its SVG plots next to it under img/.
package multiregion
