package participant_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/quotaplatform/quota/participant"
	"github.com/quotaplatform/quota/region"
)

// A participant on embedded defaults (an in-process store and an embedded
// NATS server in the data directory) with a built-in default plan: the
// limiter decides in process, and Close drains it and sends the final
// usage reports to the ledger stream.
func Example() {
	dir, err := os.MkdirTemp("", "participant-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	o := participant.DefaultOptions()
	o.DataDir = dir
	o.DefaultPlan = region.Plan{Rate: 1, Capacity: 3}
	o.Logger = slog.New(slog.DiscardHandler)
	ctx := context.Background()
	p, err := participant.Open(ctx, o)
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)

	fmt.Println(p.Health().Ready)
	for range 4 {
		d, err := p.Limiter().Allow(ctx, "acct_1", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining, d.Plan().Name)
	}
	// Output:
	// true
	// true 2 default
	// true 1 default
	// true 0 default
	// false 0 default
}
