package limit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLimitIsALeaf: the vocabulary imports the standard library, period
// and the store contract's bounds, nothing else: no engine, no client, so
// that every package may import it cheaply.
func TestLimitIsALeaf(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := map[string]bool{
		"github.com/quotaplatform/quota/limit":        true,
		"github.com/quotaplatform/quota/period":       true,
		"github.com/quotaplatform/quota/region/store": true,
	}
	for _, dep := range strings.Fields(string(out)) {
		if !allowed[dep] {
			t.Errorf("limit imports %s", dep)
		}
	}
}
