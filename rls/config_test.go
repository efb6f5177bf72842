package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/rls"
)

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       string // the whole "file:line: field: ..." prefix up to the message
	}{
		{"not yaml", "domain: [x", "bad.yaml:1: yaml: did not find expected"},
		{"not yaml, later line", "domain: d\ndescriptors:\n  - key: a\n    value: b: c", "bad.yaml:4: yaml: mapping values are not allowed"},
		{"empty", "", "bad.yaml: empty file"},
		{"not a mapping", "- a", "bad.yaml:1: want a mapping"},
		{"no domain", "descriptors: []", "bad.yaml:1: domain: missing"},
		{"empty domain", "domain: \"\"", "bad.yaml:1: domain: must not be empty"},
		{"unknown top field", "domain: d\nratelimits: []", "bad.yaml:2: ratelimits: unknown field"},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}", "bad.yaml:2: descriptors: want a list"},
		{"missing key", "domain: d\ndescriptors:\n  - value: a", "bad.yaml:3: descriptors[0].key: missing or empty"},
		{"unknown descriptor field", "domain: d\ndescriptors:\n  - key: a\n    vaule: b", "bad.yaml:4: descriptors[0].vaule: unknown field"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1",
			`bad.yaml:5: descriptors[0].rate_limit.unit: must be second, minute, hour or day, got "fortnight"`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1",
			"bad.yaml:5: descriptors[0].rate_limit.unit: missing"},
		{"missing requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}",
			"bad.yaml:4: descriptors[0].rate_limit.requests_per_unit: missing"},
		{"negative requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}",
			"bad.yaml:4: descriptors[0].rate_limit.requests_per_unit: want a whole number"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}",
			"bad.yaml:4: descriptors[0].rate_limit: unlimited takes no unit"},
		{"bad bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe", "bad.yaml:4: descriptors[0].shadow_mode: want true or false"},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}",
			"bad.yaml:4: descriptors[0].rate_limit.replaces[0].name: missing or empty"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b", `bad.yaml:5: descriptors[1]: duplicate descriptor "a_b"`},
		{"nested error", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: week, requests_per_unit: 1}",
			"bad.yaml:6: descriptors[0].descriptors[0].rate_limit.unit: must be"},
		{"prefix wildcard", "domain: d\ndescriptors:\n  - key: path\n    value: /api/*", `bad.yaml:3: descriptors[0].value: prefix wildcards (a value ending in *) are not supported, got "/api/*"`},
		{"field twice", "domain: d\ndomain: e", "bad.yaml:2: domain: given twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rls.Parse("bad.yaml", []byte(tc.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error starting %q", err, tc.want)
			}
			if !errors.Is(err, rls.ErrInvalidConfig) {
				t.Errorf("%v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("b.yml", "domain: b\n")
	write("notes.txt", "not config")
	c, err := rls.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "a,b" {
		t.Errorf("domains %s, want a,b", got)
	}
	write("c.yaml", "domain: a\n")
	_, err = rls.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "c.yaml:1: domain: \"a\" is already defined in "+filepath.Join(dir, "a.yaml")) {
		t.Errorf("duplicate domain: %v", err)
	}
	if _, err := rls.Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestKey(t *testing.T) {
	short := rls.Key("0123456789abcdef", "edge", desc("remote address", "1.2.3.4", "path", "/a,b=c%").Entries)
	if want := "rls:0123456789abcdef:edge:remote%20address=1.2.3.4,path=/a%2Cb%3Dc%25"; short != want {
		t.Errorf("key %q, want %q", short, want)
	}
	long := rls.Key("0123456789abcdef", "edge", desc("k", strings.Repeat("v", 300)).Entries)
	if !strings.HasPrefix(long, "rls:0123456789abcdef:#") || len(long) != len("rls:0123456789abcdef:#")+32 {
		t.Errorf("long key %q", long)
	}
	if other := rls.Key("0123456789abcdef", "edge", desc("k", strings.Repeat("v", 299)+"w").Entries); other == long {
		t.Error("two long keys collide")
	}
	for _, k := range []string{short, long, rls.Key("o5m", "é", desc("ключ", "\x00\n").Entries)} {
		if err := checkKey(k); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
}

func FuzzKey(f *testing.F) {
	f.Add("edge", "k", "v")
	f.Add("", " ", "\xff")
	f.Fuzz(func(t *testing.T, domain, k, v string) {
		if err := checkKey(rls.Key("0123456789abcdef", domain, desc(k, v).Entries)); err != nil {
			t.Fatal(err)
		}
	})
}

// Parse never panics, and refuses only with a *ConfigError.
func FuzzParse(f *testing.F) {
	f.Add(edgeConfig)
	f.Add("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}")
	f.Add("domain: [x")
	f.Fuzz(func(t *testing.T, text string) {
		_, err := rls.Parse("f.yaml", []byte(text))
		var ce *rls.ConfigError
		if err != nil && !errors.As(err, &ce) {
			t.Fatalf("%v is not a *ConfigError", err)
		}
	})
}
