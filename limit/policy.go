package limit

import (
	"fmt"
	"strings"
)

// FailurePolicy is a plan's behaviour while the regional store is
// unavailable. The zero value is the default: FailDegraded for a leased
// plan, FailClosed for an exact one (Plan.Policy). Adding a policy is a
// constant here, an entry in FailurePolicies, and its behaviour in region.
type FailurePolicy string

// The failure policies.
const (
	// FailDegraded decides from a local bucket at the region's rate times
	// this process's share of the key's traffic (docs/design.md
	// [degraded-share]); what it allows is charged to the store after
	// recovery (docs/design.md [degraded-debt]).
	FailDegraded FailurePolicy = "degraded"
	// FailOpen allows every check, flagged. Nothing is charged back.
	FailOpen FailurePolicy = "open"
	// FailClosed rejects every check, flagged, with RetryAfter until the
	// breaker's next probe.
	FailClosed FailurePolicy = "closed"
)

// FailurePolicies lists every failure policy, the leased default first.
var FailurePolicies = []FailurePolicy{FailDegraded, FailOpen, FailClosed}

// Valid reports whether f is one of FailurePolicies; the zero value (the
// default) is not.
func (f FailurePolicy) Valid() bool { return oneOf(f, FailurePolicies) }

// Mode is how a plan's decisions reach the store. The zero value is the
// default, ModeLeased.
type Mode string

// The modes.
const (
	// ModeLeased spends permits leased from the store (docs/design.md
	// [leasing]).
	ModeLeased Mode = "leased"
	// ModeExact makes one atomic store call per decision, with no lease:
	// the region's bucket is never over-spent (docs/design.md
	// [plan-semantics]). A check that the last call shows cannot be paid,
	// even with a full refill since, is rejected without a call.
	ModeExact Mode = "exact"
)

// Modes lists every mode, the default first.
var Modes = []Mode{ModeLeased, ModeExact}

// Valid reports whether m is one of Modes; the zero value (the default)
// is not.
func (m Mode) Valid() bool { return oneOf(m, Modes) }

func oneOf[T comparable](v T, all []T) bool {
	for _, a := range all {
		if v == a {
			return true
		}
	}
	return false
}

// quoted lists vs as `"a", "b" or "c"`, for messages.
func quoted[T ~string](vs []T) string {
	var b strings.Builder
	for i, v := range vs {
		switch {
		case i == len(vs)-1 && i > 0:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", string(v))
	}
	return b.String()
}
