package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tokenVars are the per-region bearer tokens of the var file apply-test.sh applies.
type tokenVars struct {
	Check map[string][]string `json:"check_tokens"`
	Read  map[string][]string `json:"read_tokens"`
}

// tokenRoles are the Secret keys the limiters read their tokens from, with the tokens of the
// var file each must hold.
var tokenRoles = []struct {
	key    string
	tokens func(tokenVars) map[string][]string
}{
	{"check-token", func(v tokenVars) map[string][]string { return v.Check }},
	{"read-token", func(v tokenVars) map[string][]string { return v.Read }},
}

// tokens asserts that the Secrets a region's limiters and control plane read QUOTA_CHECK_TOKEN
// and QUOTA_READ_TOKEN from hold exactly that region's tokens of the var file and none of
// another region's: a token of one region is refused in every other. (No container runs here,
// so what the daemons would accept is what their Secret holds.)
func (c *checker) tokens(ctx context.Context, varsFile string) {
	b, err := os.ReadFile(varsFile)
	if err != nil {
		c.failf("tokens: %v", err)
		return
	}
	var vars tokenVars
	if err := json.Unmarshal(b, &vars); err != nil {
		c.failf("tokens: %s: %v", varsFile, err)
		return
	}
	if len(vars.Check) < 2 {
		c.failf("tokens: %s gives check tokens to %d regions: nothing to tell apart", varsFile, len(vars.Check))
		return
	}
	for _, region := range sortedRegions(vars) {
		ns := "quota-" + region
		for _, name := range []string{"quota-limiter-" + region, "quota-control-plane-" + region} {
			s, err := c.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) && strings.HasPrefix(name, "quota-control-plane-"):
				continue // the control plane runs in one region
			case err != nil:
				c.failf("tokens: secret %s/%s: %v", ns, name, err)
				continue
			}
			for _, p := range tokenProblems(region, s.Data, vars) {
				c.failf("tokens: secret %s/%s: %s", ns, name, p)
			}
		}
	}
}

// tokenProblems lists what is wrong with the data of a Secret of region: each token key must
// hold exactly the region's tokens (comma-joined) and no token of another region. Problems
// name regions and counts, never a token.
func tokenProblems(region string, data map[string][]byte, vars tokenVars) []string {
	var out []string
	for _, role := range tokenRoles {
		have := map[string]bool{}
		for _, t := range strings.Split(string(data[role.key]), ",") {
			if t != "" {
				have[t] = true
			}
		}
		all := role.tokens(vars)
		own := all[region]
		missing := 0
		for _, t := range own {
			if !have[t] {
				missing++
			}
		}
		if missing > 0 || len(have) != len(own) {
			out = append(out, fmt.Sprintf("%s holds %d tokens, %d of %s's %d missing", role.key, len(have), missing, region, len(own)))
		}
		for _, other := range sortedRegions(vars) {
			if other == region {
				continue
			}
			for _, r := range tokenRoles {
				for _, t := range r.tokens(vars)[other] {
					if have[t] {
						out = append(out, fmt.Sprintf("%s holds a %s of region %s", role.key, r.key, other))
					}
				}
			}
		}
	}
	return out
}

// sortedRegions are the regions that have check or read tokens, sorted.
func sortedRegions(vars tokenVars) []string {
	set := map[string]bool{}
	for r := range vars.Check {
		set[r] = true
	}
	for r := range vars.Read {
		set[r] = true
	}
	out := make([]string, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
