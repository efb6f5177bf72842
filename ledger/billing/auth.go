package billing

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// Token lengths, in bytes.
const (
	MinTokenLen = 16
	MaxTokenLen = 256
)

// scopedTag starts a prefix-scoped entry of a token list.
const scopedTag = "prefix:"

// Errors of Access.Authorize.
var (
	// ErrDisabled: no token is configured, so no one may read (503).
	ErrDisabled = errors.New("billing: API disabled: no token configured")
	// ErrNoToken: the request has no "Authorization: Bearer <token>" (401).
	ErrNoToken = errors.New("billing: no bearer token")
	// ErrWrongToken: the bearer token is not a configured one (403).
	ErrWrongToken = errors.New("billing: wrong token")
)

// Token is one bearer token of the billing API and the keys it may read.
// String hides Secret, so a Token can be logged.
type Token struct {
	// Secret is MinTokenLen to MaxTokenLen bytes of printable ASCII
	// (0x21–0x7e) other than ','.
	Secret string
	// Prefix limits the token to keys that start with it; "" reads every
	// key.
	Prefix string
}

// String prints the token's scope, never its secret.
func (t Token) String() string {
	if t.Prefix == "" {
		return "<token>"
	}
	return scopedTag + t.Prefix + "=<token>"
}

// GoString is String, so that %#v hides the secret too.
func (t Token) GoString() string { return t.String() }

// ParseTokens parses a token list: entries separated by ',', blanks around
// an entry ignored, each entry one of
//
//	TOKEN                 reads every key
//	prefix:PREFIX=TOKEN   reads only keys that start with PREFIX
//
// PREFIX is printable ASCII without ',' or '=' (the entry splits at its first
// '='); TOKEN is as Token.Secret says, and may contain '=' and ':' but must
// not start with "prefix:". Listing several tokens lets a client move to a
// new token before the old one is removed. A token may appear once. Errors
// name the entry by position and never quote a secret. An empty list is
// valid and grants nothing.
func ParseTokens(list string) ([]Token, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var tokens []Token
	seen := make(map[string]bool)
	for i, entry := range strings.Split(list, ",") {
		t, err := parseToken(strings.TrimSpace(entry))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		if seen[t.Secret] {
			return nil, fmt.Errorf("entry %d: the same token is listed twice", i+1)
		}
		seen[t.Secret] = true
		tokens = append(tokens, t)
	}
	return tokens, nil
}

func parseToken(entry string) (Token, error) {
	if entry == "" {
		return Token{}, errors.New("empty (two commas in a row?)")
	}
	rest, scoped := strings.CutPrefix(entry, scopedTag)
	if !scoped {
		return Token{Secret: entry}, checkSecret(entry)
	}
	prefix, secret, ok := strings.Cut(rest, "=")
	if !ok {
		return Token{}, errors.New("a scoped entry is prefix:PREFIX=TOKEN, and it has no '='")
	}
	if err := checkPrefix(prefix); err != nil {
		return Token{}, err
	}
	return Token{Secret: secret, Prefix: prefix}, checkSecret(secret)
}

// check validates t as ParseTokens does.
func (t Token) check() error {
	if t.Prefix != "" {
		if err := checkPrefix(t.Prefix); err != nil {
			return err
		}
	}
	return checkSecret(t.Secret)
}

func checkPrefix(p string) error {
	if p == "" {
		return errors.New("the prefix of prefix:PREFIX=TOKEN is empty (omit \"prefix:\" for a token that reads every key)")
	}
	if len(p) > MaxKeyLen {
		return fmt.Errorf("the prefix is longer than %d bytes", MaxKeyLen)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x21 || c > 0x7e || c == ',' || c == '=' {
			return fmt.Errorf("prefix byte %d (0x%02x) is not printable ASCII other than ',' and '='", i, c)
		}
	}
	return nil
}

func checkSecret(s string) error {
	if len(s) < MinTokenLen || len(s) > MaxTokenLen {
		return fmt.Errorf("a token must be %d to %d bytes, this one is %d", MinTokenLen, MaxTokenLen, len(s))
	}
	if strings.HasPrefix(s, scopedTag) {
		return fmt.Errorf("a token must not start with %q", scopedTag)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == ',' {
			return fmt.Errorf("token byte %d is not printable ASCII other than ','", i)
		}
	}
	return nil
}

// Scope is what an authorized request may read.
type Scope struct {
	// Prefix: only keys that start with it; "" means every key.
	Prefix string
}

// Allows reports whether the scope covers key.
func (s Scope) Allows(key string) bool { return strings.HasPrefix(key, s.Prefix) }

// Access decides which bearer tokens may read which keys. It keeps only
// SHA-256 digests of the tokens. Its zero value and a nil *Access grant
// nothing (ErrDisabled). It is immutable and safe for concurrent use.
type Access struct {
	grants []grant
}

type grant struct {
	sum   [sha256.Size]byte
	scope Scope
}

// NewAccess returns an Access granting each token its scope. It checks the
// tokens as ParseTokens does; no tokens is valid and grants nothing.
func NewAccess(tokens []Token) (*Access, error) {
	a := &Access{}
	seen := make(map[[sha256.Size]byte]bool)
	for i, t := range tokens {
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("billing: token %d: %w", i+1, err)
		}
		sum := sha256.Sum256([]byte(t.Secret))
		if seen[sum] {
			return nil, fmt.Errorf("billing: token %d: the same token is listed twice", i+1)
		}
		seen[sum] = true
		a.grants = append(a.grants, grant{sum: sum, scope: Scope{Prefix: t.Prefix}})
	}
	return a, nil
}

// Enabled reports whether any token is configured.
func (a *Access) Enabled() bool { return a != nil && len(a.grants) > 0 }

// Authorize reads an Authorization header value ("Bearer <token>", the
// scheme in any case) and returns the token's scope. Errors: ErrDisabled,
// ErrNoToken (absent, empty, or another scheme), ErrWrongToken. The
// presented token is hashed and compared with every configured digest in
// constant time, so neither a token's content nor its length leaks through
// timing.
func (a *Access) Authorize(header string) (Scope, error) {
	if !a.Enabled() {
		return Scope{}, ErrDisabled
	}
	tok, ok := bearer(header)
	if !ok {
		return Scope{}, ErrNoToken
	}
	sum := sha256.Sum256([]byte(tok))
	found := -1
	for i := range a.grants {
		if subtle.ConstantTimeCompare(sum[:], a.grants[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Scope{}, ErrWrongToken
	}
	return a.grants[found].scope, nil
}

// bearer returns the token of "Bearer <token>".
func bearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}
