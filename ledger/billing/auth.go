package billing

import (
	"errors"
	"fmt"
	"strings"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/region/store"
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
	// Secret is a token as bearer.Check says, not starting with "prefix:".
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
	var tokens []Token
	seen := make(map[string]bool)
	for i, entry := range bearer.Entries(list) {
		t, err := parseToken(entry)
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
	if len(p) > store.MaxKeyLen {
		return fmt.Errorf("the prefix is longer than %d bytes", store.MaxKeyLen)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x21 || c > 0x7e || c == ',' || c == '=' {
			return fmt.Errorf("prefix byte %d (0x%02x) is not printable ASCII other than ',' and '='", i, c)
		}
	}
	return nil
}

func checkSecret(s string) error {
	if err := bearer.Check(s); err != nil {
		return err
	}
	if strings.HasPrefix(s, scopedTag) {
		return fmt.Errorf("a token must not start with %q", scopedTag)
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
	tokens bearer.Set
	scopes []Scope // scopes[i] is what tokens[i] may read
}

// NewAccess returns an Access granting each token its scope. It checks the
// tokens as ParseTokens does; no tokens is valid and grants nothing.
func NewAccess(tokens []Token) (*Access, error) {
	a := &Access{}
	seen := make(map[string]bool)
	for i, t := range tokens {
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("billing: token %d: %w", i+1, err)
		}
		if seen[t.Secret] {
			return nil, fmt.Errorf("billing: token %d: the same token is listed twice", i+1)
		}
		seen[t.Secret] = true
		a.tokens = append(a.tokens, bearer.NewSet(t.Secret)...)
		a.scopes = append(a.scopes, Scope{Prefix: t.Prefix})
	}
	return a, nil
}

// Enabled reports whether any token is configured.
func (a *Access) Enabled() bool { return a != nil && len(a.tokens) > 0 }

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
	tok, ok := bearer.FromHeader(header)
	if !ok {
		return Scope{}, ErrNoToken
	}
	i := a.tokens.Index(tok)
	if i < 0 {
		return Scope{}, ErrWrongToken
	}
	return a.scopes[i], nil
}
