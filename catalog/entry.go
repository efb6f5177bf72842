package catalog

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/quotaplatform/quota/limit"
)

// Kind names a kind of catalogue entry.
type Kind string

// The kinds of entry.
const (
	KindPlan Kind = "plan" // a plan: Rate, Capacity and its semantics
	KindKey  Kind = "key"  // a key → plan assignment: Plan
	KindCost Kind = "cost" // an endpoint weight: Cost
	// KindRLS is one domain of Envoy's rate limit service: YAML, the
	// domain's envoyproxy/ratelimit configuration, as written. The
	// catalogue keeps the text; package rls parses it (rls.PutDomain
	// validates before writing, and its catalogue watch refuses what does
	// not parse).
	KindRLS Kind = "rls"
)

// MaxRLSBytes bounds the YAML of one rate limit service domain, so that
// its entry fits a NATS message (1 MiB by default) with room to spare.
const MaxRLSBytes = 256 << 10

// Entry is one catalogue entry as stored in the bucket: what it says, who
// wrote it and when. Only the fields of its Kind are set.
type Entry struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"` // plan name, API key, endpoint name or rate limit service domain

	Rate     float64 `json:"rate,omitempty"`     // KindPlan: cost units per second
	Capacity float64 `json:"capacity,omitempty"` // KindPlan: burst, cost units
	// KindPlan: the plan's semantics (limit.Plan), each omitted when it
	// is the default: "failure_policy" ("degraded", "open", "closed"),
	// "mode" ("leased", "exact"), "shadow" and "concurrency" (slots).
	FailurePolicy limit.FailurePolicy `json:"failure_policy,omitempty"`
	Mode          limit.Mode          `json:"mode,omitempty"`
	Shadow        bool                `json:"shadow,omitempty"`
	Concurrency   int                 `json:"concurrency,omitempty"`
	// KindPlan: the plan's calendar quotas (docs/design.md [quotas]),
	// shortest period first, and their calendar: "time_zone" (IANA, ""
	// is UTC) and "anchor_day" (the day months start on; 0 is the 1st).
	Quotas    []Quota `json:"quotas,omitempty"`
	TimeZone  string  `json:"time_zone,omitempty"`
	AnchorDay int     `json:"anchor_day,omitempty"`

	Plan string `json:"plan,omitempty"` // KindKey: the assigned plan's name
	Cost int64  `json:"cost,omitempty"` // KindCost: the endpoint's weight
	// KindRLS: the domain's envoyproxy/ratelimit YAML, as written.
	YAML string `json:"yaml,omitempty"`

	Actor string    `json:"actor"` // who wrote it (a token name, "admin")
	At    time.Time `json:"at"`    // when, on the writer's clock

	// Revision is the bucket revision of this value (not stored in it).
	Revision uint64 `json:"revision,omitempty"`
	// Deleted marks a deletion. Delete stores it as a tombstone value,
	// with Actor and At, so that History says who deleted the entry; a
	// bucket delete marker (from a tool outside the API) shows up in
	// History as an entry with Deleted and no Actor.
	Deleted bool `json:"deleted,omitempty"`
}

// field is the API field that names an entry of kind k, or "" for an
// unknown kind.
func (k Kind) field() string {
	return map[Kind]string{KindPlan: "plan", KindKey: "key", KindCost: "endpoint", KindRLS: "domain"}[k]
}

// Quota is one calendar quota of a plan entry: at most Limit cost units
// per Period ("hour", "day", "week" or "month"); limit.Quota, whose JSON
// form the entry stores.
type Quota = limit.Quota

// RegionPlan returns a plan entry as a limit.Plan, named after the entry.
// Quotas that do not make a plan (too many, a period twice) are left out:
// validate refuses such an entry, and RegionPlan is for valid ones.
func (e Entry) RegionPlan() limit.Plan {
	p := limit.Plan{Name: e.Name, Rate: e.Rate, Capacity: e.Capacity,
		FailurePolicy: e.FailurePolicy, Mode: e.Mode, Shadow: e.Shadow, Concurrency: e.Concurrency,
		TimeZone: e.TimeZone, AnchorDay: e.AnchorDay}
	p.Quotas, _ = limit.NewQuotas(e.Quotas)
	return p
}

// planEntry is p as a plan entry called name.
func planEntry(name string, p limit.Plan, actor string) Entry {
	e := Entry{Kind: KindPlan, Name: name, Rate: p.Rate, Capacity: p.Capacity,
		FailurePolicy: p.FailurePolicy, Mode: p.Mode, Shadow: p.Shadow, Concurrency: p.Concurrency,
		TimeZone: p.TimeZone, AnchorDay: p.AnchorDay, Actor: actor}
	if p.HasQuotas() {
		e.Quotas = p.QuotaList()
	}
	return e
}

// kvKey is the bucket key of an entry: the kind, a dot, and the name in
// unpadded URL-safe base64, because an API key may hold bytes a KV key may
// not (KV keys are NATS subject tokens).
func kvKey(kind Kind, name string) string {
	return string(kind) + "." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// parseKVKey splits a bucket key into kind and name.
func parseKVKey(k string) (Kind, string, error) {
	kind, enc, ok := strings.Cut(k, ".")
	if !ok {
		return "", "", fmt.Errorf("catalog: bucket key %q has no kind", k)
	}
	switch Kind(kind) {
	case KindPlan, KindKey, KindCost, KindRLS:
	default:
		return "", "", fmt.Errorf("catalog: bucket key %q has unknown kind %q", k, kind)
	}
	name, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", "", fmt.Errorf("catalog: bucket key %q: name: %w", k, err)
	}
	return Kind(kind), string(name), nil
}

// decodeEntry parses a bucket value stored under key k at revision rev.
func decodeEntry(k string, value []byte, rev uint64) (Entry, error) {
	kind, name, err := parseKVKey(k)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	if err := json.Unmarshal(value, &e); err != nil {
		return Entry{}, fmt.Errorf("catalog: value of %q: %w", k, err)
	}
	if e.Kind != kind || e.Name != name {
		return Entry{}, fmt.Errorf("catalog: value of %q says %s %q", k, e.Kind, e.Name)
	}
	if err := e.Validate(); err != nil {
		return Entry{}, fmt.Errorf("catalog: value of %q: %w", k, err)
	}
	e.Revision = rev
	return e, nil
}

// Validate checks the fields of e's kind by the rules of their owners
// (limit.Plan.Validate for a plan, limit.CheckName for names); the error
// wraps ErrInvalidName or ErrInvalidValue. The catalogue refuses to write
// or read an entry that fails it, and planmirror to mirror one.
func (e Entry) Validate() error {
	field := e.Kind.field()
	if field == "" {
		return fmt.Errorf("%w: kind %q", ErrInvalidValue, e.Kind)
	}
	if err := CheckName(field, e.Name); err != nil {
		return err
	}
	if e.Deleted {
		return nil // a tombstone says nothing else
	}
	switch e.Kind {
	case KindPlan:
		if _, err := limit.NewQuotas(e.Quotas); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidValue, err)
		}
		if err := e.RegionPlan().Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidValue, err)
		}
	case KindKey:
		if err := CheckName("plan", e.Plan); err != nil {
			return err
		}
	case KindCost:
		if e.Cost < 1 {
			return fmt.Errorf("%w: cost must be at least 1, got %d", ErrInvalidValue, e.Cost)
		}
	case KindRLS:
		switch {
		case strings.TrimSpace(e.YAML) == "":
			return fmt.Errorf("%w: yaml of domain %q must not be empty", ErrInvalidValue, e.Name)
		case len(e.YAML) > MaxRLSBytes:
			return fmt.Errorf("%w: yaml of domain %q is %d bytes, at most %d allowed", ErrInvalidValue, e.Name, len(e.YAML), MaxRLSBytes)
		}
	}
	return nil
}

// CheckName reports whether s can name a plan, key, endpoint or domain: the rule of
// limit.CheckKey (1 to store.MaxKeyLen bytes of printable ASCII without
// spaces), so that every assigned key is one the limiter accepts. The error
// wraps ErrInvalidName and names field.
func CheckName(field, s string) error { return limit.CheckName(ErrInvalidName, field, s) }

// logName is an entry's name as a log line above debug carries it: a
// plan's, endpoint's or domain's as it is, a customer's key as "<key>"
// (keys are logged at debug level only).
func logName(kind Kind, name string) string {
	if kind == KindKey {
		return "<key>"
	}
	return name
}
