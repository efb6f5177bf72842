// Package httplimit puts a region.Limiter in front of Go HTTP handlers, and
// writes the rate-limit response fields that the limiter daemon's check API
// (package limitapi) writes too.
//
// Middleware takes the key from a function and the cost from the endpoint's
// weight (the endpoint is the path of the matched ServeMux pattern, else
// the URL path, by default). The key should be the account a request acts
// for, as the service's own authentication resolved it (KeyFromContext),
// not a secret API key: keys are stored and reported. The default reads the
// X-API-Key header as sent. A rejection answers
// 429 with Retry-After; allowed and rejected responses both carry
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset,
// X-RateLimit-Stale and the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers). A decision taken while the store
// was unavailable also carries X-RateLimit-Degraded, whose value is the
// plan's failure policy that decided it (degraded, open or closed), as the
// daemon's check API answers "degraded":true with its "failure_policy".
// Config.Checks, when set, times each decision by its path.
//
// In concurrency mode (Config.Concurrency) it takes a concurrency slot of
// the key's plan before the handler instead (429 when none is free) and
// releases it after the handler returns or panics.
//
// What it does not own: the limiter, the plan catalogue, authentication.
// Errors it logs above debug level do not name the key (RedactKey).
// It starts no goroutine; everything is safe for concurrent use.
package httplimit
