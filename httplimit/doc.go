// Package httplimit puts a region.Limiter in front of Go HTTP handlers, and
// writes the rate-limit response fields that the limiter daemon's check API
// (package limitapi) writes too.
//
// Middleware takes the key from a function (the X-API-Key header by
// default) and the cost from the endpoint's weight (the endpoint is the
// path of the matched ServeMux pattern, else the URL path, by default). A rejection answers
// 429 with Retry-After; allowed and rejected responses both carry
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset,
// X-RateLimit-Stale and the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers).
//
// What it does not own: the limiter, the plan catalogue, authentication.
// It starts no goroutine; everything is safe for concurrent use.
package httplimit
