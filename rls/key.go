package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/quotaplatform/quota/region"
)

// KeyPrefix starts every limiter key rls makes; Plans owns the keys with
// it. A catalogue key spelt so would be shadowed.
const KeyPrefix = "rls:"

// hashKeysOver is the longest key Key writes out in full. It is the
// limiter's key limit of the versions that introduced these keys, and it
// stays: a key's bucket, quota counters and ledger rows are under it, so
// it must not change form. It is within store.MaxKeyLen.
const hashKeysOver = 256

// Key is the limiter key of a request descriptor's entries matched by the
// rule whose key part is id:
//
//	rls:<id>:<domain>:<key>=<value>,<key>=<value>
//
// with every byte outside [A-Za-z0-9._~/-] of domain, keys and values
// percent-encoded, so that the key is printable ASCII without spaces and
// unambiguous. id is 16 hex digits naming the configured descriptor (a
// digest of its domain and path), or o<n><s|m|h|d> for a request's limit
// override. A key longer than hashKeysOver bytes keeps its id and replaces
// the rest by '#' and 32 hex digits of a SHA-256 digest of domain and
// entries. Each runtime value of a key-only descriptor so gets its own
// key, and the same entries always get the same key while the rule that
// matches them stays.
func Key(id, domain string, entries []*rlv3.RateLimitDescriptor_Entry) string {
	n := len(KeyPrefix) + len(id) + 2 + len(domain)
	for _, e := range entries {
		n += len(e.GetKey()) + len(e.GetValue()) + 2
	}
	var b strings.Builder
	b.Grow(min(n, hashKeysOver+8))
	b.WriteString(KeyPrefix)
	b.WriteString(id)
	b.WriteByte(':')
	escape(&b, domain)
	b.WriteByte(':')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		escape(&b, e.GetKey())
		b.WriteByte('=')
		escape(&b, e.GetValue())
		if b.Len() > hashKeysOver {
			return hashedKey(id, domain, entries)
		}
	}
	if b.Len() > hashKeysOver {
		return hashedKey(id, domain, entries)
	}
	return b.String()
}

// Key is the limiter key a request descriptor of domain with entries
// spends from under c, as the Service makes it (the package-level Key of
// the matched rule), so that a caller can find the descriptor's usage in
// the ledger; ok is false when no limited rule matches (unknown domain, no
// match, unlimited, requests_per_unit 0). It reads one descriptor alone: a
// limit override, or another descriptor of the same request whose rule
// replaces this one's, is the request's business.
func (c *Config) Key(domain string, entries []*rlv3.RateLimitDescriptor_Entry) (key string, ok bool) {
	if c == nil || len(entries) == 0 {
		return "", false
	}
	root := c.domains[domain]
	if root == nil {
		return "", false
	}
	r := root.match(entries)
	if r == nil || r.Unlimited || r.RequestsPerUnit == 0 {
		return "", false
	}
	return Key(r.id, domain, entries), true
}

func hashedKey(id, domain string, entries []*rlv3.RateLimitDescriptor_Entry) string {
	h := sha256.New()
	h.Write([]byte(domain))
	for _, e := range entries {
		h.Write([]byte{0})
		h.Write([]byte(e.GetKey()))
		h.Write([]byte{0})
		h.Write([]byte(e.GetValue()))
	}
	var sum [sha256.Size]byte
	return KeyPrefix + id + ":#" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

func escape(b *strings.Builder, s string) {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
}

// overrideID is the key part of a request's limit override: o<n><unit>.
func overrideID(n uint32, u Unit) string {
	return "o" + strconv.FormatUint(uint64(n), 10) + string(u.letter())
}

// parseOverrideID reads an override id back into its plan.
func parseOverrideID(id string) (region.Plan, error) {
	if len(id) < 3 || id[0] != 'o' {
		return region.Plan{}, fmt.Errorf("%w: %q is not an override", region.ErrUnknownPlan, id)
	}
	u := Unit(strings.IndexByte("?smhd", id[len(id)-1]))
	n, err := strconv.ParseUint(id[1:len(id)-1], 10, 32)
	if err != nil || u < UnitSecond || n == 0 {
		return region.Plan{}, fmt.Errorf("%w: %q is not an override", region.ErrUnknownPlan, id)
	}
	return planOf(uint32(n), u, "override"), nil
}
