package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the settings table of README.md from the declarations")

// Markers of the generated settings table in README.md.
const (
	tableBegin = "<!-- settings table: generated, do not edit -->\n"
	tableEnd   = "<!-- end of settings table -->\n"
)

// TestSettingsTable: README.md's settings table is the one the
// declarations generate, so the docs cannot drift from the flags.
func TestSettingsTable(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(readme, []byte(tableBegin))
	committed, after, ok2 := bytes.Cut(rest, []byte(tableEnd))
	if !ok || !ok2 {
		t.Fatalf("README.md lacks the markers %q and %q around the settings table", tableBegin, tableEnd)
	}
	var table bytes.Buffer
	if err := help([]string{"--markdown"}, &table); err != nil {
		t.Fatal(err)
	}
	if *update {
		out := bytes.Join([][]byte{before, []byte(tableBegin), table.Bytes(), []byte(tableEnd), after}, nil)
		if err := os.WriteFile("README.md", out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(committed, table.Bytes()) {
		t.Fatalf("README.md's settings table differs from the declarations in settings.go; regenerate it with\n"+
			"\tgo test ./cmd/regional-limiter -run TestSettingsTable -update\n"+
			"generated:\n%s", table.String())
	}
}

// TestHelp: --help and help list the commands and every flag; help
// --markdown prints the table; anything else after help is an error.
func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	if _, err := parseOptions([]string{"--help"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: err = %v, want flag.ErrHelp", err)
	}
	var stdout bytes.Buffer
	if err := help(nil, &stdout); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != stderr.String() {
		t.Errorf("help and --help differ:\nhelp:\n%s\n--help:\n%s", stdout.String(), stderr.String())
	}
	for _, want := range []string{"regional-limiter [flags]", "regional-limiter help [--markdown]", "QUOTA_<FLAG>"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stdout.String())
		}
	}
	for name := range pinnedFlags {
		if !strings.Contains(stdout.String(), "-"+name+" ") && !strings.Contains(stdout.String(), "-"+name+"\n") {
			t.Errorf("help lacks --%s", name)
		}
	}
	var md bytes.Buffer
	if err := help([]string{"--markdown"}, &md); err != nil || !strings.HasPrefix(md.String(), "| flag | environment | default | |\n") {
		t.Errorf("help --markdown = %v, %q…", err, md.String()[:min(md.Len(), 60)])
	}
	if err := help([]string{"serve"}, &md); err == nil {
		t.Error("help serve: no error")
	}
}
