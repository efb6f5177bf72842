package quotabase_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The limiters import quotabase for its Client: it pulls in no Postgres
// driver (pgledger does) and no fx.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/jackc/pgx", "go.uber.org/fx"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("quotabase imports %s", dep)
			}
		}
	}
}
