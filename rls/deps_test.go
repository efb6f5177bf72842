package rls_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/region"
)

func checkKey(k string) error { return region.CheckKey(k) }

// rls is a library: it never imports fx.
func TestNoFx(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/quotaplatform/quota/rls").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.uber.org/fx") || strings.HasPrefix(dep, "go.uber.org/dig") {
			t.Errorf("rls imports %s", dep)
		}
	}
}
