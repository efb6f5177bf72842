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

// requireMode skips unless the scenarios were asked for.
func requireMode(t *testing.T) Mode {
	t.Helper()
	if testing.Short() {
		t.Skip("multiregion: skipped under -short (runs real binaries for minutes)")
	}
	m := ModeFromEnv()
	if m == ModeOff {
		t.Skip("multiregion: set QUOTA_MULTIREGION=short (CI form, about 9 min: make multiregion-short) or =full (make multiregion) to run the multi-region scenarios")
	}
	return m
}
