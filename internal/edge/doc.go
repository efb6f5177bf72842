// Package edge holds what the two daemons (cmd/regional-limiter and
// cmd/reconciler) do alike at their edges: a flag value for secrets that
// never prints, the graceful stop of an HTTP server after a shutdown
// delay, and the logger.
package edge
