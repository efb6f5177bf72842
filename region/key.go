package region

import "fmt"

// checkKey rejects keys the store and the ledger cannot carry safely.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key must not be empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, at most %d allowed", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: key byte %d (0x%02x) is not printable ASCII", ErrInvalidKey, i, c)
		}
	}
	return nil
}
