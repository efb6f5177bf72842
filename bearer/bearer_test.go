package bearer_test

import (
	"strings"
	"testing"

	"github.com/quotaplatform/quota/bearer"
)

const (
	tokA = "tok-a-0123456789abcdef"
	tokB = "tok-b-0123456789abcdef"
)

func TestParseList(t *testing.T) {
	tests := []struct {
		name, list string
		want       []string
		err        string // part of the error; "" for none
	}{
		{"empty", "", nil, ""},
		{"blank", "  ", nil, ""},
		{"one", tokA, []string{tokA}, ""},
		{"two with blanks", " " + tokA + " , " + tokB, []string{tokA, tokB}, ""},
		{"may hold = and :", "bbbbbbbbbbbbbbbb-with=and:", []string{"bbbbbbbbbbbbbbbb-with=and:"}, ""},
		{"empty entry", tokA + ",," + tokB, nil, "entry 2: empty"},
		{"trailing comma", tokA + ",", nil, "entry 2: empty"},
		{"short", tokA + ",short", nil, "entry 2: a token must be 16 to 256 bytes, this one is 5"},
		{"long", strings.Repeat("x", 257), nil, "entry 1: a token must be 16 to 256 bytes"},
		{"space inside", "aaaaaaaa aaaaaaaa", nil, "entry 1: token byte 8 is not printable ASCII"},
		{"non-ASCII", "aaaaaaaaaaaaaaaé", nil, "entry 1: token byte 15"},
		{"not printable", tokA + ",tok-b-0123456789\x01bcdef", nil, "entry 2: token byte 16"},
		{"twice", tokA + "," + tokA, nil, "entry 2: the same token is listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bearer.ParseList(tt.list)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.err)
				}
				if strings.Contains(err.Error(), tokA) || strings.Contains(err.Error(), "short") {
					t.Fatalf("error quotes a token: %v", err)
				}
				return
			}
			if err != nil || strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("ParseList = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFromHeader(t *testing.T) {
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"Bearer " + tokA, tokA, true},
		{"bearer  " + tokA + " ", tokA, true},
		{"Basic " + tokA, "", false},
		{"Bearer ", "", false},
		{tokA, "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := bearer.FromHeader(tt.header)
		if got != tt.want || ok != tt.ok {
			t.Errorf("FromHeader(%q) = %q, %v; want %q, %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSetIndex(t *testing.T) {
	s := bearer.NewSet(tokA, "", tokB)
	for _, tt := range []struct {
		tok  string
		want int
	}{{tokA, 0}, {tokB, 1}, {"tok-c-0123456789abcdef", -1}, {"", -1}} {
		if got := s.Index(tt.tok); got != tt.want {
			t.Errorf("Index(%q) = %d, want %d", tt.tok, got, tt.want)
		}
	}
	if got := (bearer.Set{}).Index(tokA); got != -1 {
		t.Errorf("empty set: Index = %d, want -1", got)
	}
}

// A set looks up a token read from a header without allocating, at every
// length a token may have and past it, and finds it.
func TestIndexAllocatesNothing(t *testing.T) {
	for _, n := range []int{bearer.MinLen, 32, 33, 64, bearer.MaxLen, bearer.MaxLen + 1} {
		header := "Bearer " + strings.Repeat("t", n)
		tok, _ := bearer.FromHeader(header)
		s := bearer.NewSet(tokA, tok)
		if got := s.Index(tok); got != 1 {
			t.Errorf("%d-byte token: Index = %d, want 1", n, got)
		}
		allocs := testing.AllocsPerRun(100, func() {
			tok, _ := bearer.FromHeader(header)
			s.Index(tok)
		})
		if n <= bearer.MaxLen && allocs != 0 {
			t.Errorf("%d-byte token: %.0f allocations per lookup, want 0", n, allocs)
		}
	}
}
