package region

import "github.com/quotaplatform/quota/limit"

// CheckKey reports whether key can be a key (limit.CheckKey): 1 to
// store.MaxKeyLen bytes of printable ASCII without spaces. The error wraps
// ErrInvalidKey. Allow checks every key with it, so a caller of Allow need
// not check first.
func CheckKey(key string) error { return limit.CheckKey(key) }

// CheckName applies CheckKey's rule to a name spelt like a key
// (limit.CheckName): the error wraps kind and names field.
func CheckName(kind error, field, s string) error { return limit.CheckName(kind, field, s) }
