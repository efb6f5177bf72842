package main

import (
	"strings"
	"testing"
)

// TestTokenProblems checks the per-region token assertion on hand-made Secret data: it passes
// for exactly the region's own tokens, and fails for a Secret holding another region's check or
// read token, one missing a token, and the shared token every region had before tokens were
// per region; no problem names a token.
func TestTokenProblems(t *testing.T) {
	vars := tokenVars{
		Check: map[string][]string{"eu": {"CHECK-EU-1", "CHECK-EU-2"}, "us": {"CHECK-US-1"}},
		Read:  map[string][]string{"eu": {"READ-EU-1"}, "us": {"READ-US-1"}},
	}
	tests := []struct {
		name  string
		data  map[string]string
		wants []string // substrings of the problems, in order; none: passes
	}{
		{"own tokens", map[string]string{"check-token": "CHECK-EU-1,CHECK-EU-2", "read-token": "READ-EU-1"}, nil},
		{"another region's check token", map[string]string{"check-token": "CHECK-EU-1,CHECK-EU-2,CHECK-US-1", "read-token": "READ-EU-1"},
			[]string{"check-token holds 3 tokens", "check-token holds a check-token of region us"}},
		{"another region's read token", map[string]string{"check-token": "CHECK-EU-1,CHECK-EU-2", "read-token": "READ-US-1"},
			[]string{"read-token holds 1 tokens, 1 of eu's 1 missing", "read-token holds a read-token of region us"}},
		{"a token missing", map[string]string{"check-token": "CHECK-EU-1", "read-token": "READ-EU-1"},
			[]string{"check-token holds 1 tokens, 1 of eu's 2 missing"}},
		{"one token for every region (before)", map[string]string{"check-token": "CHECK-US-1", "read-token": "READ-US-1"},
			[]string{"check-token holds 1 tokens, 2 of eu's 2 missing", "check-token holds a check-token of region us",
				"read-token holds 1 tokens, 1 of eu's 1 missing", "read-token holds a read-token of region us"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := map[string][]byte{}
			for k, v := range tt.data {
				data[k] = []byte(v)
			}
			got := tokenProblems("eu", data, vars)
			if len(got) != len(tt.wants) {
				t.Fatalf("problems %q, want %d like %q", got, len(tt.wants), tt.wants)
			}
			for i, w := range tt.wants {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d: %q, want it to contain %q", i, got[i], w)
				}
				for _, tok := range []string{"CHECK-", "READ-"} {
					if strings.Contains(got[i], tok) {
						t.Errorf("problem %d names a token: %q", i, got[i])
					}
				}
			}
		})
	}
}
