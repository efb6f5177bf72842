package partition

import (
	"go/build"
	"strings"
	"testing"
)

// TestNoIO fails when partition, directly or through a dependency, imports a
// network client, the clock-driven runtime of another package, or fx: it
// must stay pure arithmetic.
func TestNoIO(t *testing.T) {
	banned := []string{
		"net", "net/http", "net/rpc", "os/exec", "database/sql",
		"github.com/nats-io/", "github.com/redis/", "github.com/jackc/",
		"github.com/hashicorp/", "go.uber.org/fx", "github.com/prometheus/",
	}
	seen := map[string]bool{}
	var walk func(path string)
	walk = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		for _, b := range banned {
			if path == b || (strings.HasSuffix(b, "/") && strings.HasPrefix(path, b)) {
				t.Errorf("partition depends on banned package %s", path)
			}
		}
		pkg, err := build.Import(path, ".", 0)
		if err != nil {
			return // e.g. "C"
		}
		for _, imp := range pkg.Imports {
			walk(imp)
		}
	}
	walk("github.com/quotaplatform/quota/partition")
	if len(seen) < 3 {
		t.Fatalf("import walk saw only %v: is the module path right?", seen)
	}
}
