package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// Token lengths, in bytes.
const (
	MinLen = 16
	MaxLen = 256
)

// Check reports whether tok can be a token: MinLen to MaxLen bytes of
// printable ASCII (0x21–0x7e) other than ','. Its errors never quote tok.
func Check(tok string) error {
	if tok == "" {
		return errors.New("empty (two commas in a row?)")
	}
	if len(tok) < MinLen || len(tok) > MaxLen {
		return fmt.Errorf("a token must be %d to %d bytes, this one is %d", MinLen, MaxLen, len(tok))
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x21 || c > 0x7e || c == ',' {
			return fmt.Errorf("token byte %d is not printable ASCII other than ','", i)
		}
	}
	return nil
}

// Entries splits a token list: entries separated by ',', blanks around an
// entry ignored. A blank list has no entry.
func Entries(list string) []string {
	if strings.TrimSpace(list) == "" {
		return nil
	}
	entries := strings.Split(list, ",")
	for i := range entries {
		entries[i] = strings.TrimSpace(entries[i])
	}
	return entries
}

// ParseList reads a list of plain tokens (see Entries and Check). A token
// may appear once. Errors name the entry by position and never quote a
// token. A blank list is valid and holds no token.
func ParseList(list string) ([]string, error) {
	tokens := Entries(list)
	if err := CheckList(tokens); err != nil {
		return nil, err
	}
	return tokens, nil
}

// EntryError is a bad entry of a token list.
type EntryError struct {
	Index int // position in the list, from 0
	Err   error
}

func (e *EntryError) Error() string { return fmt.Sprintf("entry %d: %v", e.Index+1, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// CheckList checks each token with Check and that none appears twice. Its
// error is an *EntryError naming the first bad one.
func CheckList(tokens []string) error {
	seen := make(map[string]bool, len(tokens))
	for i, t := range tokens {
		if err := Check(t); err != nil {
			return &EntryError{Index: i, Err: err}
		}
		if seen[t] {
			return &EntryError{Index: i, Err: errors.New("the same token is listed twice")}
		}
		seen[t] = true
	}
	return nil
}

// FromHeader returns the token of an Authorization value "Bearer <token>",
// the scheme in any case.
func FromHeader(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

// Set holds the SHA-256 digests of tokens. Its zero value holds none. It is
// immutable once built and safe for concurrent use.
type Set [][sha256.Size]byte

// NewSet returns the set of tokens, skipping empty ones.
func NewSet(tokens ...string) Set {
	var s Set
	for _, t := range tokens {
		if t != "" {
			s = append(s, sha256.Sum256([]byte(t)))
		}
	}
	return s
}

// Index returns the position in the set of tok's digest, or -1. It compares
// with every digest in constant time, so neither a token's content, its
// length nor its position leaks through timing.
func (s Set) Index(tok string) int {
	sum := digest(tok)
	found := -1
	for i := range s {
		if subtle.ConstantTimeCompare(sum[:], s[i][:]) == 1 {
			found = i
		}
	}
	return found
}

// digest is tok's SHA-256 digest. A token of up to MaxLen bytes is hashed
// from a copy on the stack: []byte(tok) would allocate for any token over
// 32 bytes, on every request a guard checks.
func digest(tok string) [sha256.Size]byte {
	if len(tok) > MaxLen {
		return sha256.Sum256([]byte(tok))
	}
	var buf [MaxLen]byte
	return sha256.Sum256(buf[:copy(buf[:], tok)])
}
