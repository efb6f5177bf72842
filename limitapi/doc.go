// Package limitapi is the regional limiter daemon's HTTP API: the check API
// for services that cannot import the region library, and the control plane
// that writes the plan catalogue.
//
// Check API: POST /v1/allow with {"key":…,"cost":…} or {"key":…,"endpoint":…}
// answers 200 with the decision as JSON and as response fields (see
// httplimit.WriteHeaders); POST /v1/allow/batch takes {"checks":[…]} and
// answers {"results":[…]} in the same order, each a decision or an error.
//
// Control plane: PUT/GET/DELETE /v1/limits/{plan}, PUT/GET/DELETE
// /v1/keys/{key}, PUT/GET/DELETE /v1/costs/{endpoint}; a GET with
// ?history=1 lists who changed the entry and when, deletions included.
// Writes and deletions need "Authorization: Bearer <admin token>"; a plan
// that keys are assigned to is not deleted (409).
//
// Bad input (malformed JSON, a field of the wrong type, an unknown field, an
// empty, oversized or non-printable key, a cost ≤ 0 or above the plan's
// capacity, an unknown plan, a missing or wrong token, an oversized body)
// answers 4xx with {"error":…,"field":…} naming the field.
//
// It owns no goroutine and no state beyond its Config; it is safe for
// concurrent use.
package limitapi
