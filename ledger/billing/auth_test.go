package billing_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/ledger/billing"
)

const (
	tokA = "tok-A-0123456789abcdef"
	tokB = "tok-B-0123456789abcdef"
	tokT = "tok-T-0123456789abc=="
)

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name    string
		list    string
		want    []billing.Token
		wantErr string
	}{
		{"empty", "", nil, ""},
		{"blank", "  ", nil, ""},
		{"one", tokA, []billing.Token{{Secret: tokA}}, ""},
		{"rotation", tokA + ", " + tokB, []billing.Token{{Secret: tokA}, {Secret: tokB}}, ""},
		{"scoped, token with = and :", "prefix:acct_42_=" + tokT + ":x", []billing.Token{{Secret: tokT + ":x", Prefix: "acct_42_"}}, ""},
		{"mixed", tokA + ",prefix:acct/7=" + tokB, []billing.Token{{Secret: tokA}, {Secret: tokB, Prefix: "acct/7"}}, ""},
		{"too short", "short", nil, "entry 1: a token must be 16 to 256 bytes"},
		{"too long", strings.Repeat("x", 257), nil, "entry 1: a token must be"},
		{"space inside", "tok A 0123456789abcdef", nil, "entry 1: token byte 3"},
		{"empty entry", tokA + ",," + tokB, nil, "entry 2: empty"},
		{"trailing comma", tokA + ",", nil, "entry 2: empty"},
		{"duplicate", tokA + "," + tokA, nil, "entry 2: the same token is listed twice"},
		{"duplicate across scopes", tokA + ",prefix:p=" + tokA, nil, "entry 2: the same token"},
		{"scoped without =", "prefix:acct_" + tokA, nil, "entry 1: a scoped entry is prefix:PREFIX=TOKEN"},
		{"scoped empty prefix", "prefix:=" + tokA, nil, "entry 1: the prefix of prefix:PREFIX=TOKEN is empty"},
		{"scoped short token", "prefix:acct_=short", nil, "entry 1: a token must be"},
		{"scoped token looks scoped", "prefix:a=prefix:" + tokA, nil, `must not start with "prefix:"`},
		{"non-ASCII prefix", "prefix:ü=" + tokA, nil, "entry 1: prefix byte 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := billing.ParseTokens(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				for _, secret := range []string{tokA, tokB, "short"} {
					if strings.Contains(err.Error(), secret) {
						t.Fatalf("error %q quotes a secret", err)
					}
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("ParseTokens = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestTokenHidesSecret(t *testing.T) {
	tok := billing.Token{Secret: tokA, Prefix: "acct_"}
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%+v", []billing.Token{tok}), fmt.Sprintf("%#v", tok),
		fmt.Sprintf("%+v", struct{ T []billing.Token }{[]billing.Token{tok}})} {
		if strings.Contains(s, tokA) || !strings.Contains(s, "acct_") {
			t.Errorf("printed %q", s)
		}
	}
}

func TestAuthorize(t *testing.T) {
	tokens, err := billing.ParseTokens(tokA + "," + tokB + ",prefix:acct_42_=" + tokT)
	if err != nil {
		t.Fatal(err)
	}
	access, err := billing.NewAccess(tokens)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		header string
		want   billing.Scope
		err    error
	}{
		{"", billing.Scope{}, billing.ErrNoToken},
		{"Bearer", billing.Scope{}, billing.ErrNoToken},
		{"Bearer   ", billing.Scope{}, billing.ErrNoToken},
		{"Basic " + tokA, billing.Scope{}, billing.ErrNoToken},
		{tokA, billing.Scope{}, billing.ErrNoToken},
		{"Bearer nope", billing.Scope{}, billing.ErrWrongToken},
		{"Bearer " + tokA + "x", billing.Scope{}, billing.ErrWrongToken},
		{"Bearer " + tokA[:len(tokA)-1], billing.Scope{}, billing.ErrWrongToken},
		{"Bearer " + tokA, billing.Scope{}, nil},
		{"bearer  " + tokB + " ", billing.Scope{}, nil},
		{"Bearer " + tokT, billing.Scope{Prefix: "acct_42_"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			got, err := access.Authorize(tt.header)
			if !errors.Is(err, tt.err) || got != tt.want {
				t.Fatalf("Authorize = %+v, %v; want %+v, %v", got, err, tt.want, tt.err)
			}
		})
	}
	for _, a := range []*billing.Access{nil, {}} {
		if _, err := a.Authorize("Bearer " + tokA); !errors.Is(err, billing.ErrDisabled) {
			t.Errorf("no tokens: err = %v, want ErrDisabled", err)
		}
	}
	if _, err := billing.NewAccess([]billing.Token{{Secret: "short"}}); err == nil {
		t.Error("NewAccess accepted a short token")
	}
}

func TestScopeAllows(t *testing.T) {
	tests := []struct {
		prefix, key string
		want        bool
	}{
		{"", "anything", true},
		{"acct_42_", "acct_42_", true},
		{"acct_42_", "acct_42_x", true},
		{"acct_42_", "acct_420", false},
		{"acct_42_", "acct_4", false},
	}
	for _, tt := range tests {
		if got := (billing.Scope{Prefix: tt.prefix}).Allows(tt.key); got != tt.want {
			t.Errorf("Scope{%q}.Allows(%q) = %v", tt.prefix, tt.key, got)
		}
	}
}

// The handler's answers to each credential, before any query runs.
func TestHandlerAuth(t *testing.T) {
	tokens, _ := billing.ParseTokens(tokA + "," + tokB + ",prefix:acct_42_=" + tokT)
	access, err := billing.NewAccess(tokens)
	if err != nil {
		t.Fatal(err)
	}
	const rng = "&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z"
	tests := []struct {
		name   string
		access *billing.Access
		auth   string
		query  string
		status int
		field  string
	}{
		{"disabled", nil, "Bearer " + tokA, "key=k" + rng, 503, ""},
		{"no token", access, "", "key=k" + rng, 401, "Authorization"},
		{"wrong token", access, "Bearer " + tokA + "0", "key=k" + rng, 403, "Authorization"},
		{"wrong token, bad query", access, "Bearer nope", "key=", 403, "Authorization"},
		{"old token", access, "Bearer " + tokA, "key=k" + rng, 200, ""},
		{"new token", access, "Bearer " + tokB, "key=k" + rng, 200, ""},
		{"scoped, own key", access, "Bearer " + tokT, "key=acct_42_a" + rng, 200, ""},
		{"scoped, other key", access, "Bearer " + tokT, "key=acct_43_a" + rng, 403, "key"},
		{"right token, bad query", access, "Bearer " + tokA, "key=k", 400, "from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &billing.Handler{Ledger: &fixedQuerier{}, Access: tt.access}
			req := httptest.NewRequest(http.MethodGet, "/v1/usage?"+tt.query, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			body := decodeError(t, rec.Body.Bytes())
			if rec.Code != tt.status || (tt.status != 200 && (body["field"] != tt.field || body["error"] == "")) {
				t.Fatalf("status %d body %v, want %d naming %q", rec.Code, body, tt.status, tt.field)
			}
			if got := rec.Header().Get("WWW-Authenticate"); (tt.status == 401) != strings.HasPrefix(got, "Bearer") {
				t.Fatalf("WWW-Authenticate %q with status %d", got, rec.Code)
			}
			if tt.name == "disabled" && body["error"] != "billing API disabled: set --billing-token" {
				t.Fatalf("disabled: %v", body)
			}
		})
	}
}

// FuzzBillingAuth checks the token list syntax and the Authorization
// header: Authorize grants exactly the configured secrets their scopes, and
// a parsed list printed back parses to the same tokens.
func FuzzBillingAuth(f *testing.F) {
	f.Add(tokA+",prefix:acct_="+tokB, "Bearer "+tokB)
	f.Add(tokA, "bearer "+tokA)
	f.Add("prefix:a=b=c=0123456789abcdef", "Bearer b=c=0123456789abcdef")
	f.Add(tokA, "Basic "+tokA)
	f.Add("", "Bearer ")
	f.Fuzz(func(t *testing.T, list, header string) {
		tokens, err := billing.ParseTokens(list)
		if err != nil {
			return
		}
		var parts []string
		for _, tok := range tokens {
			if tok.Prefix != "" {
				parts = append(parts, "prefix:"+tok.Prefix+"="+tok.Secret)
			} else {
				parts = append(parts, tok.Secret)
			}
		}
		again, err := billing.ParseTokens(strings.Join(parts, ","))
		if err != nil || !slices.Equal(again, tokens) {
			t.Fatalf("round trip of %q: %v, %v", list, again, err)
		}
		access, err := billing.NewAccess(tokens)
		if err != nil {
			t.Fatalf("NewAccess refused parsed tokens: %v", err)
		}
		scope, err := access.Authorize(header)
		scheme, presented, _ := strings.Cut(strings.TrimSpace(header), " ")
		presented = strings.TrimSpace(presented)
		i := slices.IndexFunc(tokens, func(tok billing.Token) bool { return tok.Secret == presented })
		switch {
		case len(tokens) == 0:
			if !errors.Is(err, billing.ErrDisabled) {
				t.Fatalf("no tokens: %v", err)
			}
		case !strings.EqualFold(scheme, "Bearer") || presented == "":
			if !errors.Is(err, billing.ErrNoToken) {
				t.Fatalf("header %q: %v, want ErrNoToken", header, err)
			}
		case i < 0:
			if !errors.Is(err, billing.ErrWrongToken) {
				t.Fatalf("header %q: %v, want ErrWrongToken", header, err)
			}
		default:
			if err != nil || scope.Prefix != tokens[i].Prefix {
				t.Fatalf("header %q: %+v, %v; want prefix %q", header, scope, err, tokens[i].Prefix)
			}
		}
	})
}
