// Package buildinfo says which build a binary is, for its --version: the
// main module's version and the VCS commit it was built from, as the Go
// toolchain recorded them (runtime/debug.ReadBuildInfo). A build that
// recorded neither (go run, -buildvcs=false, a build outside a module)
// says so instead of failing.
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Line is the --version line of the command name: name, module version,
// commit (with "+modified" for a dirty tree) and Go version, such as
// "reconciler v1.4.0 commit 0123abc go1.26.8" or
// "reconciler (devel) unknown commit go1.26.8".
func Line(name string) string {
	info, ok := debug.ReadBuildInfo()
	return line(name, info, ok)
}

func line(name string, info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return name + " (unknown version) unknown commit"
	}
	version := info.Main.Version
	if version == "" {
		version = "(unknown version)"
	}
	commit, modified := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	switch {
	case commit == "":
		commit = "unknown commit"
	case modified:
		commit = "commit " + commit + "+modified"
	default:
		commit = "commit " + commit
	}
	return fmt.Sprintf("%s %s %s %s", name, version, commit, info.GoVersion)
}
