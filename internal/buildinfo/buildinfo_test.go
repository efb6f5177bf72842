package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestLine: the version line names the module version and the commit
// when the build recorded them, and says "unknown" where it did not.
func TestLine(t *testing.T) {
	withVCS := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	tests := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"release", withVCS("0123abc", "false"), true, "reconciler v1.4.0 commit 0123abc go1.26.8"},
		{"dirty tree", withVCS("0123abc", "true"), true, "reconciler v1.4.0 commit 0123abc+modified go1.26.8"},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true,
			"reconciler (devel) unknown commit go1.26.8"},
		{"no build info", nil, false, "reconciler (unknown version) unknown commit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := line("reconciler", tt.info, tt.ok); got != tt.want {
				t.Fatalf("line = %q, want %q", got, tt.want)
			}
		})
	}
	if got := Line("x"); !strings.HasPrefix(got, "x ") || !strings.Contains(got, "commit") {
		t.Fatalf("Line of this test binary = %q", got)
	}
}
