package region_test

import (
	"context"
	"fmt"

	"github.com/quotaplatform/quota/region"
)

// A single process on the in-memory store: the first decision leases from
// the store, later ones spend the lease locally until it runs out.
func Example() {
	store := region.NewMemoryStore(nil)
	plans := region.StaticPlans{Default: region.Plan{Rate: 1, Capacity: 3}}
	lim, err := region.New(store, plans, region.DefaultConfig())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, err := lim.Allow(ctx, "acct_1", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining, d.Limit, d.Degraded, d.RetryAfter > 0)
	}
	_, err = lim.Allow(ctx, "acct_1", 5)
	fmt.Println(err)
	// Output:
	// true 2 3 false false
	// true 1 3 false false
	// true 0 3 false false
	// false 0 3 false true
	// cost exceeds capacity: cost 5 is above the plan's capacity 3
}
