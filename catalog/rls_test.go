package catalog_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/limit"
)

const edgeYAML = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"

// TestPutRLSChecks: a rate limit service domain's entry needs a valid
// domain name and YAML text of 1 to MaxRLSBytes bytes; a refused one never
// reaches the bucket. (The YAML's content is package rls's to check.)
func TestPutRLSChecks(t *testing.T) {
	ns := testserver.StartNATS(t)
	c := start(t, ns.URL, "", limit.Plan{})
	waitSynced(t, c)
	cases := []struct {
		name, domain, yaml string
		want               error // nil: accepted
		field              string
	}{
		{"a domain", "edge", edgeYAML, nil, ""},
		{"the largest text", "big", strings.Repeat("#", catalog.MaxRLSBytes), nil, ""},
		{"empty text", "empty", "", catalog.ErrInvalidValue, "yaml"},
		{"blank text", "blank", " \n\t\n", catalog.ErrInvalidValue, "yaml"},
		{"text too large", "huge", strings.Repeat("#", catalog.MaxRLSBytes+1), catalog.ErrInvalidValue, "yaml"},
		{"empty domain", "", edgeYAML, catalog.ErrInvalidName, "domain"},
		{"domain with a space", "my domain", edgeYAML, catalog.ErrInvalidName, "domain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.PutRLS(context.Background(), "admin", tc.domain, tc.yaml)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("PutRLS = %v", err)
				}
				if e, ok := c.RLSEntry(tc.domain); !ok || e.YAML != tc.yaml || e.Actor != "admin" {
					t.Fatalf("RLSEntry = %+v %v", e, ok)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("PutRLS = %v, want %v naming %s", err, tc.want, tc.field)
			}
			if _, ok := c.RLSEntry(tc.domain); ok {
				t.Fatalf("the refused domain %q is in the catalogue", tc.domain)
			}
		})
	}
}

// TestRLSPushedAndCached: a domain written on one catalogue reaches
// another on the same bucket (OnChange is called), its deletion too, and
// the last known good cache file keeps the domains.
func TestRLSPushedAndCached(t *testing.T) {
	ns := testserver.StartNATS(t)
	dir := t.TempDir()
	a := start(t, ns.URL, "", limit.Plan{})
	b := start(t, ns.URL, filepath.Join(dir, "b.json"), limit.Plan{})
	waitSynced(t, a)
	waitSynced(t, b)
	changed := make(chan struct{}, 16)
	b.OnChange(func() { changed <- struct{}{} })
	ctx := context.Background()

	for _, d := range []string{"edge", "api", "internal"} {
		v, err := a.PutRLS(ctx, "alice", d, strings.Replace(edgeYAML, "edge", d, 1))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.WaitVersion(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-changed:
	case <-time.After(2 * time.Second):
		t.Fatal("OnChange not called for a pushed domain")
	}
	var names []string
	for _, e := range b.RLSEntries() {
		names = append(names, e.Name)
		if e.Kind != catalog.KindRLS || e.Actor != "alice" || !strings.HasPrefix(e.YAML, "domain: "+e.Name+"\n") || e.Revision == 0 {
			t.Errorf("pushed entry %+v", e)
		}
	}
	if got := strings.Join(names, ","); got != "api,edge,internal" {
		t.Fatalf("RLSEntries on the other catalogue: %s, want api,edge,internal (sorted)", got)
	}

	v, err := a.Delete(ctx, "bob", catalog.KindRLS, "internal")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WaitVersion(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.RLSEntry("internal"); ok {
		t.Fatal("deleted domain still on the other catalogue")
	}
	if _, err := a.Delete(ctx, "bob", catalog.KindRLS, "internal"); !errors.Is(err, catalog.ErrNotFound) || !strings.Contains(err.Error(), `domain "internal"`) {
		t.Fatalf("second delete: %v, want ErrNotFound naming the domain", err)
	}
	hist, err := a.History(ctx, catalog.KindRLS, "internal")
	if err != nil || len(hist) != 2 || !hist[1].Deleted || hist[1].Actor != "bob" {
		t.Fatalf("history = %+v, %v", hist, err)
	}

	b.Stop()
	c := start(t, "", filepath.Join(dir, "b.json"), limit.Plan{})
	if got := c.RLSEntries(); len(got) != 2 || got[0].Name != "api" || got[1].YAML != edgeYAML {
		t.Fatalf("RLSEntries from the cache file = %+v", got)
	}
}
