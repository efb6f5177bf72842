package limit

import "errors"

// Errors of the vocabulary. region re-exports them under the same names.
var (
	// ErrInvalidPlan: a plan's field is out of its range (Plan.Validate).
	ErrInvalidPlan = errors.New("invalid plan")
	// ErrUnknownPlan: the key resolves to no plan.
	ErrUnknownPlan = errors.New("unknown plan")
	// ErrInvalidKey: the key is empty, longer than store.MaxKeyLen bytes,
	// or holds a byte that is not printable ASCII.
	ErrInvalidKey = errors.New("invalid key")
)

// FieldError is one bad field. Field names it as the catalogue's JSON and
// the HTTP API spell it ("rate", "quotas[1].limit", "key"), so that an API
// answers with the field without parsing messages; errors.Is(err, Kind)
// holds.
type FieldError struct {
	// Kind is what was invalid: ErrInvalidPlan, ErrInvalidKey, or the
	// kind a caller of CheckName chose.
	Kind error
	// Field is the field's name.
	Field string
	// Reason says what is wrong, naming the field: "rate must be …".
	Reason string
}

func (e *FieldError) Error() string { return e.Kind.Error() + ": " + e.Reason }

// Unwrap returns Kind.
func (e *FieldError) Unwrap() error { return e.Kind }

// planError is a bad plan field.
func planError(field, reason string) error {
	return &FieldError{Kind: ErrInvalidPlan, Field: field, Reason: reason}
}
