package main

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestSlug(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Running it", "running-it"},
		{"[leasing] Lease sizes grow and shrink (AIMD)", "leasing-lease-sizes-grow-and-shrink-aimd"},
		{"`reconciler serve`", "reconciler-serve"},
		{"Routes and who may call them", "routes-and-who-may-call-them"},
		{"The region's process count: memberlist", "the-regions-process-count-memberlist"},
		{"See [the guide](x.md) — now", "see-the-guide--now"},
		{"stream_fill ratio", "stream_fill-ratio"},
	}
	for _, tt := range tests {
		if got := slug(tt.heading); got != tt.want {
			t.Errorf("slug(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

func TestCheck(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte(strings.Join([]string{
			"# quota",
			"See [design](docs/design.md#leasing-why), [ops](docs/ops.md), [gone](docs/gone.md).",
			"[bad anchor](docs/design.md#no-such) and [self](#quota) and [self bad](#nope).",
			"[dir](region/) [web](https://example.com/x.md#y) [code](region/lease.go#L10)",
			"```",
			"[in a fence](nowhere.md)",
			"```",
			"`[in a span](nowhere.md)`",
			"[ref]: docs/design.md#twice-1",
			"[refbad]: docs/missing.md",
		}, "\n"))},
		"docs/design.md": {Data: []byte("# Design\n## [leasing] Why\n## Twice\n## Twice\n<a name=\"old-name\"></a>\n")},
		"docs/ops.md":    {Data: []byte("[back](../README.md#quota) [old](design.md#old-name) [up](../../x.md)\n")},
	}
	tracked := []string{"README.md", "docs/design.md", "docs/ops.md", "region/lease.go"}
	got, err := check(fsys, tracked, []string{"README.md", "docs/ops.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:2: docs/gone.md: no such tracked file or directory docs/gone.md",
		"README.md:3: #nope: README.md has no heading with anchor #nope",
		"README.md:3: docs/design.md#no-such: docs/design.md has no heading with anchor #no-such",
		"README.md:10: docs/missing.md: no such tracked file or directory docs/missing.md",
		"docs/ops.md:1: ../../x.md: no such tracked file or directory ../x.md",
	}
	if strings.Join(got, "\n") != strings.Join(sortedCopy(want), "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(sortedCopy(want), "\n"))
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestCitations(t *testing.T) {
	fsys := fstest.MapFS{
		"docs/design.md":  {Data: []byte("# Design\nCite as `docs/design.md [name]`.\n## [leasing] Leases\n## [quotas] Quotas\n")},
		"region/lease.go": {Data: []byte("// Leases (docs/design.md [leasing]) and\n// quotas (docs/design.md\n// [quotas]), not [gone] in docs/design.md.\n")},
		"ledger/x.go":     {Data: []byte("// see docs/design.md\n// [renamed], twice: docs/design.md [renamed]\n")},
		"README.md":       {Data: []byte("([quotas] in [docs/design.md](docs/design.md)), [old] in [../docs/design.md](x)\n")},
		"notes.txt":       {Data: []byte("docs/design.md [ignored]\n")},
	}
	tracked := []string{"README.md", "docs/design.md", "ledger/x.go", "notes.txt", "region/lease.go"}
	got, err := citations(fsys, tracked)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md: cites docs/design.md [old], which has no heading ## [old]",
		"ledger/x.go: cites docs/design.md [renamed], which has no heading ## [renamed]",
		"region/lease.go: cites docs/design.md [gone], which has no heading ## [gone]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
