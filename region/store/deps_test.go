package store_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: the contract and its stores never import region (the
// lease engine imports them), the lease engine imports only the contract,
// not a store, and the contract imports no Redis client.
func TestDependencies(t *testing.T) {
	cases := []struct {
		pkg    string
		banned []string
	}{
		{".", []string{"github.com/quotaplatform/quota/region", "github.com/redis/go-redis"}},
		{"./storetest", []string{"github.com/quotaplatform/quota/region", "github.com/redis/go-redis"}},
		{"../memstore", []string{"github.com/quotaplatform/quota/region", "github.com/redis/go-redis"}},
		{"../redisstore", []string{"github.com/quotaplatform/quota/region"}},
		{"..", []string{"github.com/quotaplatform/quota/region/memstore", "github.com/quotaplatform/quota/region/redisstore", "github.com/redis/go-redis/v9"}},
	}
	for _, tc := range cases {
		out, err := exec.Command("go", "list", "-deps", tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", tc.pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range tc.banned {
				if dep == banned {
					t.Errorf("%s imports %s", tc.pkg, dep)
				}
			}
		}
	}
}
