package region_test

import (
	"context"
	"fmt"

	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// A single process on the in-memory store: the first decision leases from
// the store, later ones spend the lease locally until it runs out.
func Example() {
	store := memstore.New(nil)
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

// Plans carry their semantics: a shadow plan allows every check and says
// which it would have rejected; an exact plan makes one store call per
// admitted check; a plan with a concurrency limit hands out slots.
func Example_planSemantics() {
	plans := region.StaticPlans{Keys: map[string]region.Plan{
		"trial":   {Rate: region.MinRate, Capacity: 1, Shadow: true},
		"partner": {Rate: region.MinRate, Capacity: 2, Mode: region.ModeExact},
		"llm":     {Rate: 1, Capacity: 1, Concurrency: 1},
	}}
	lim, err := region.New(memstore.New(nil), plans, region.DefaultConfig())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		d, _ := lim.Allow(ctx, "trial", 1)
		fmt.Println("trial:", d.Allowed, d.ShadowRejected)
	}
	for i := 0; i < 3; i++ {
		d, _ := lim.Allow(ctx, "partner", 1)
		fmt.Println("partner:", d.Allowed, d.Remaining)
	}
	a, _ := lim.Acquire(ctx, "llm", "")
	b, _ := lim.Acquire(ctx, "llm", "")
	fmt.Println("llm:", a.Allowed, b.Allowed)
	released, _ := lim.Release(ctx, "llm", a.ID)
	c, _ := lim.Acquire(ctx, "llm", "")
	fmt.Println("llm after release:", released, c.Allowed, c.Expires)
	// Output:
	// trial: true false
	// trial: true true
	// partner: true 1
	// partner: true 0
	// partner: false 0
	// llm: true false
	// llm after release: true true 30s
}
