// Package limit is the vocabulary every part of the platform shares: a
// Plan (a token bucket with its failure policy, mode, concurrency and
// calendar quotas) and its rules, the Usage a limiter reports, the quota
// bases the ledger answers, and the rule for keys and names.
//
// What it owns: the shape of these values and their validation, written
// once; every bad field is a *FieldError naming the field as the
// catalogue and the HTTP API spell it ("rate", "quotas[1].limit").
// What it does not own: deciding (region), storing plans (catalog),
// shipping usage (ledger). It imports no engine, no client and no I/O
// package, so that the reconciler and the catalogue speak of plans
// without linking the lease engine (a test in cmd/reconciler holds this).
//
// Everything here is a value or a pure function, safe for concurrent use.
// Nothing reads the clock.
package limit
