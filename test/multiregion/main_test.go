package multiregion

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := writeReportFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "multiregion report:", err)
		if code == 0 {
			code = 1
		}
	}
	RemoveBuilds()
	os.Exit(code)
}

// requireMode skips unless the scenarios were asked for, and otherwise
// runs the test beside the others that start a cluster, as many at once as
// go test's -parallel (the Makefile's targets: 2). A cluster waits most of
// its run: one used a fifth of this machine's two cores, so one test after
// another left the harness's nine minutes mostly idle.
func requireMode(t *testing.T) Mode {
	t.Helper()
	if testing.Short() {
		t.Skip("multiregion: skipped under -short (runs real binaries for minutes)")
	}
	m := ModeFromEnv()
	if m == ModeOff {
		t.Skip("multiregion: set QUOTA_MULTIREGION=short (CI form: make multiregion-short) or =full (make multiregion) to run the multi-region scenarios")
	}
	t.Parallel()
	return m
}
