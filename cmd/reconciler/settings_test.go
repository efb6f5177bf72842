package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the reconciler's settings tables in docs/configuration.md from the declarations")

// Where the generated tables are, between two markers.
const (
	settingsDoc = "../../docs/configuration.md"
	tablesBegin = "<!-- settings tables: generated, do not edit -->\n"
	tablesEnd   = "<!-- end of settings tables -->\n"
)

// TestSettingsTables: docs/configuration.md's reconciler tables are the
// ones the declarations generate, so the docs cannot drift from the flags.
func TestSettingsTables(t *testing.T) {
	doc, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(doc, []byte(tablesBegin))
	committed, after, ok2 := bytes.Cut(rest, []byte(tablesEnd))
	if !ok || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q around the settings tables", settingsDoc, tablesBegin, tablesEnd)
	}
	var tables bytes.Buffer
	if err := help([]string{"--markdown"}, &tables); err != nil {
		t.Fatal(err)
	}
	if *update {
		out := bytes.Join([][]byte{before, []byte(tablesBegin), tables.Bytes(), []byte(tablesEnd), after}, nil)
		if err := os.WriteFile(settingsDoc, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(committed, tables.Bytes()) {
		t.Fatalf("docs/configuration.md's reconciler tables differ from the declarations in settings.go; regenerate them with\n"+
			"\tgo test ./cmd/reconciler -run TestSettingsTables -update\n"+
			"generated:\n%s", tables.String())
	}
}

// TestHelp: `reconciler help` and `reconciler --help` list every command
// with its summary; `help COMMAND` and `COMMAND --help` print that
// command's flags, and only its own.
func TestHelp(t *testing.T) {
	var stdout bytes.Buffer
	if err := run([]string{"help"}, &stdout, io.Discard); err != nil {
		t.Fatalf("help: %v", err)
	}
	var viaFlag bytes.Buffer
	if err := run([]string{"--help"}, &viaFlag, io.Discard); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, c := range commands {
		line := c.name + " "
		for _, out := range []string{stdout.String(), viaFlag.String()} {
			if !strings.Contains(out, "  "+line) || !strings.Contains(out, c.summary) {
				t.Errorf("the command list lacks %q: %q", c.name, c.summary)
			}
		}
	}

	for cmd, flags := range pinnedFlags {
		var viaHelp, viaFlag bytes.Buffer
		if err := run(append([]string{"help"}, strings.Fields(cmd)...), &viaHelp, io.Discard); err != nil {
			t.Fatalf("help %s: %v", cmd, err)
		}
		if err := run(append(strings.Fields(cmd), "--help"), io.Discard, &viaFlag); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s --help: err = %v, want flag.ErrHelp", cmd, err)
		}
		if viaHelp.String() != viaFlag.String() {
			t.Errorf("help %s and %s --help differ:\n%s\n---\n%s", cmd, cmd, viaHelp.String(), viaFlag.String())
		}
		out := viaHelp.String()
		if !strings.HasPrefix(out, "Usage: reconciler "+cmd+" [flags]\n") {
			t.Errorf("help %s: starts %q", cmd, out[:min(len(out), 60)])
		}
		for name := range flags {
			if !strings.Contains(out, "  -"+name+" ") && !strings.Contains(out, "  -"+name+"\n") {
				t.Errorf("help %s lacks --%s", cmd, name)
			}
		}
		if n := strings.Count(out, "\n  -"); n != len(flags) {
			t.Errorf("help %s lists %d flags, want %d", cmd, n, len(flags))
		}
	}
	if err := run([]string{"help", "nope"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `no command "nope"`) {
		t.Errorf("help nope: err = %v", err)
	}
}
