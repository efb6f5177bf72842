package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestReconcilerDoesNotLinkTheEngine: the reconciler speaks of plans,
// usage and quota bases through package limit, so its binary does not
// link the lease engine (region) or a regional store client. A failure
// names the import chain that pulls the package in.
func TestReconcilerDoesNotLinkTheEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	imports := map[string][]string{}
	var self string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
		self = f[0] // go list -deps prints the package itself last
	}
	for _, banned := range []string{
		"github.com/quotaplatform/quota/region",
		"github.com/quotaplatform/quota/region/redisstore",
		"github.com/quotaplatform/quota/region/memstore",
		"github.com/redis/go-redis/v9",
	} {
		if chain := importChain(imports, self, banned); chain != nil {
			t.Errorf("the reconciler links %s: %s", banned, strings.Join(chain, " → "))
		}
	}
}

// importChain is a shortest chain of imports from "from" to "to" in
// imports (package → its imports), or nil when there is none.
func importChain(imports map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}
