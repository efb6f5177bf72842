package ledger_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The ledger packages are libraries: no fx, and the limiter-side package
// (ledger) pulls in no Postgres driver.
func TestDependencies(t *testing.T) {
	tests := []struct {
		pkg    string
		banned []string
	}{
		{".", []string{"go.uber.org/fx", "github.com/jackc/pgx"}},
		{"./reconcile", []string{"go.uber.org/fx"}},
		{"./billing", []string{"go.uber.org/fx"}},
		{"./planmirror", []string{"go.uber.org/fx"}},
	}
	for _, tt := range tests {
		out, err := exec.Command("go", "list", "-deps", tt.pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", tt.pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range tt.banned {
				if strings.HasPrefix(dep, b) {
					t.Errorf("%s imports %s", tt.pkg, dep)
				}
			}
		}
	}
}
