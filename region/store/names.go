package store

// MaxCount bounds a call's counts (permits, costs, quota limits): 2^53 − 1,
// exact in a Lua number.
const MaxCount = 1<<53 - 1

// Limits of the names a store carries in its own key names.
const (
	// MaxRequestIDLen is the longest request id, in bytes.
	MaxRequestIDLen = 128
	// MaxSlotIDLen is the longest lease id of a concurrency slot, in bytes.
	MaxSlotIDLen = 64
	// MaxKeyLen is the longest key, in bytes, that any part accepts: the
	// limiter (region.CheckKey), its stores, gossip digests, usage reports
	// and billing queries. It is declared here alone, in the contract every
	// one of them may import. 512: reports and billing took keys up to 512
	// bytes, and a key accepted once stays accepted.
	MaxKeyLen = 512
)

// validName reports whether s is 1 to maxLen bytes of printable ASCII
// other than the space: region.CheckKey's rule, which every store carries
// safely in its key names.
func validName(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}
