package region

import (
	"fmt"

	"github.com/quotaplatform/quota/region/store"
)

// CheckKey reports whether key can be a key: 1 to store.MaxKeyLen bytes of
// printable ASCII without spaces, which the store, the ledger and the
// catalogue's key-value bucket all carry safely. The error wraps
// ErrInvalidKey. Allow checks every key with it, so a caller of Allow need
// not check first.
func CheckKey(key string) error {
	if nameOK(key) { // the decision path: one call, no error built
		return nil
	}
	return CheckName(ErrInvalidKey, "key", key)
}

// CheckName applies CheckKey's rule to a name spelt like a key, such as a
// plan or endpoint name in the catalogue: the error wraps kind and calls
// the name field ("plan must not be empty").
func CheckName(kind error, field, s string) error {
	switch {
	case nameOK(s):
		return nil
	case s == "":
		return fmt.Errorf("%w: %s must not be empty", kind, field)
	case len(s) > store.MaxKeyLen:
		return fmt.Errorf("%w: %s is %d bytes, at most %d allowed", kind, field, len(s), store.MaxKeyLen)
	}
	i := 0
	for isNameByte(s[i]) {
		i++
	}
	return fmt.Errorf("%w: %s byte %d (0x%02x) is not printable ASCII", kind, field, i, s[i])
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
