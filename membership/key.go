package membership

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/hashicorp/memberlist"
)

// Key is a memberlist encryption key: 16, 24 or 32 bytes (AES-128, -192,
// -256). It never prints itself: %v, %s and %#v show "<redacted>", so a
// logged Config does not leak it.
type Key []byte

// String hides the key.
func (Key) String() string { return "<redacted>" }

// GoString hides the key from %#v too.
func (Key) GoString() string { return "<redacted>" }

func (k Key) check() error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("key is %d bytes, want 16, 24 or 32", len(k))
}

// ParseKeys parses the --memberlist-key value: comma-separated keys, each
// standard base64 (with padding) of 16, 24 or 32 bytes; the first encrypts,
// all decrypt (see Config.Keys). Empty means none. Errors name the key by
// its position, never by its value.
func ParseKeys(s string) ([]Key, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var keys []Key
	for i, part := range strings.Split(s, ",") {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(part))
		if err != nil {
			// A CorruptInputError says where, not what.
			return nil, fmt.Errorf("membership: key %d: not standard base64: %w", i+1, err)
		}
		k := Key(b)
		if err := k.check(); err != nil {
			return nil, fmt.Errorf("membership: key %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// encrypt sets mc up to encrypt with Keys[0] and accept any of Keys, and to
// refuse plaintext (GossipVerifyIncoming and GossipVerifyOutgoing).
func (m *Membership) encrypt(mc *memberlist.Config) error {
	if len(m.cfg.Keys) == 0 {
		return nil
	}
	secondary := make([][]byte, 0, len(m.cfg.Keys)-1)
	for _, k := range m.cfg.Keys[1:] {
		secondary = append(secondary, k)
	}
	ring, err := memberlist.NewKeyring(secondary, m.cfg.Keys[0])
	if err != nil {
		return fmt.Errorf("membership: keyring: %w", err)
	}
	mc.SecretKey = m.cfg.Keys[0]
	mc.Keyring = ring
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	return nil
}
