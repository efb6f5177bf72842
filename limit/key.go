package limit

import (
	"fmt"

	"github.com/quotaplatform/quota/region/store"
)

// CheckKey reports whether key can be a key: 1 to store.MaxKeyLen bytes of
// printable ASCII without spaces, which the store, the ledger and the
// catalogue's key-value bucket all carry safely. The error is a
// *FieldError of kind ErrInvalidKey and field "key".
func CheckKey(key string) error {
	if nameOK(key) { // the decision path: one call, no error built
		return nil
	}
	return CheckName(ErrInvalidKey, "key", key)
}

// CheckName applies CheckKey's rule to a name spelt like a key, such as a
// plan or endpoint name in the catalogue: the error is a *FieldError of
// kind and field ("plan must not be empty").
func CheckName(kind error, field, s string) error {
	var reason string
	switch {
	case nameOK(s):
		return nil
	case s == "":
		reason = field + " must not be empty"
	case len(s) > store.MaxKeyLen:
		reason = fmt.Sprintf("%s is %d bytes, at most %d allowed", field, len(s), store.MaxKeyLen)
	default:
		i := 0
		for isNameByte(s[i]) {
			i++
		}
		reason = fmt.Sprintf("%s byte %d (0x%02x) is not printable ASCII", field, i, s[i])
	}
	return &FieldError{Kind: kind, Field: field, Reason: reason}
}

// nameOK is the rule: 1 to store.MaxKeyLen bytes, each printable ASCII
// other than the space.
func nameOK(s string) bool {
	if s == "" || len(s) > store.MaxKeyLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool { return c >= 0x21 && c <= 0x7e }
