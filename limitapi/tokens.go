package limitapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// Token lengths, in bytes, of check and read tokens.
const (
	MinTokenLen = 16
	MaxTokenLen = 256
)

// ParseTokens parses a token list as --check-token and --read-token take
// it: tokens separated by ',', blanks around a token ignored. Each token is
// MinTokenLen to MaxTokenLen bytes of printable ASCII (0x21–0x7e) other
// than ','. Listing several lets callers move to a new token before the old
// one is removed. A token may appear once. Errors name the entry by
// position and never quote a token. An empty list is valid and holds no
// token.
func ParseTokens(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var tokens []string
	for i, entry := range strings.Split(list, ",") {
		tok := strings.TrimSpace(entry)
		if err := checkToken(tok); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		for _, seen := range tokens {
			if seen == tok {
				return nil, fmt.Errorf("entry %d: the same token is listed twice", i+1)
			}
		}
		tokens = append(tokens, tok)
	}
	return tokens, nil
}

func checkToken(tok string) error {
	if tok == "" {
		return errors.New("empty (two commas in a row?)")
	}
	if len(tok) < MinTokenLen || len(tok) > MaxTokenLen {
		return fmt.Errorf("a token must be %d to %d bytes, this one is %d", MinTokenLen, MaxTokenLen, len(tok))
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x21 || c > 0x7e || c == ',' {
			return fmt.Errorf("token byte %d is not printable ASCII other than ','", i)
		}
	}
	return nil
}

// tokenSet holds the SHA-256 digests of bearer tokens. Its zero value holds
// none. It is immutable once built.
type tokenSet [][sha256.Size]byte

func newTokenSet(tokens ...string) tokenSet {
	var s tokenSet
	for _, t := range tokens {
		if t != "" {
			s = append(s, sha256.Sum256([]byte(t)))
		}
	}
	return s
}

// match reports whether sum is one of the set's digests. It compares with
// every digest in constant time, so neither a token's content, its length
// nor its position in the list leaks through timing.
func (s tokenSet) match(sum *[sha256.Size]byte) bool {
	found := 0
	for i := range s {
		found |= subtle.ConstantTimeCompare(sum[:], s[i][:])
	}
	return found == 1
}

// bearer returns the token of an Authorization value "Bearer <token>", the
// scheme in any case.
func bearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}
