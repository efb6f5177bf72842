package gossip_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/membership"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// How the daemon wires a region's limiter to gossip and membership. Flags:
// --region, --process-id, --regions, --gossip-interval, --region-weights,
// --share-floor, --memberlist-bind, --memberlist-join, --memberlist-key.
func Example_wiring() {
	nc, err := nats.Connect("nats://127.0.0.1:4222") // --nats: this region's servers
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	weights, err := gossip.ParseWeights("eu=0.5,us=0.3,ap=0.2") // --region-weights
	if err != nil {
		log.Fatal(err)
	}
	host, port, err := membership.SplitHostPort("127.0.0.1:7946") // --memberlist-bind
	if err != nil {
		log.Fatal(err)
	}
	mcfg := membership.DefaultConfig()
	mcfg.NodeName, mcfg.BindAddr, mcfg.BindPort = "eu-host-1234", host, port
	mcfg.Join = []string{"10.0.0.2:7946"} // --memberlist-join
	// --memberlist-key (from a secret, never a literal): base64 of 32 bytes.
	if mcfg.Keys, err = membership.ParseKeys("c2VjcmV0LWtleS1vZi0zMi1ieXRlcy4uLi4uLi4uLi4="); err != nil {
		log.Fatal(err)
	}
	members, err := membership.New(mcfg)
	if err != nil {
		log.Fatal(err)
	}

	var lim *region.Limiter // set below; the callbacks run only after Start
	gcfg := gossip.DefaultConfig()
	gcfg.Region, gcfg.Process = "eu", "host-1234"
	// --regions: every region, this one included.
	gcfg.Regions = []string{"ap", "eu", "us"}
	gcfg.Interval = time.Second // --gossip-interval
	gcfg.Weights = weights
	gcfg.Floor = 0.05 // --share-floor
	gcfg.Registerer = prometheus.NewRegistry()
	gcfg.OnChange = func(key string) { lim.Reshare(key) }
	gcfg.OnChangeAll = func() { lim.InvalidateAll() }
	gcfg.Flush = func() { lim.Flush() }
	node, err := gossip.New(nc, gcfg)
	if err != nil {
		log.Fatal(err)
	}

	lcfg := region.DefaultConfig()
	lcfg.Region = "eu"
	lcfg.Shares = node       // region.ShareSource
	lcfg.Usage = node        // limit.UsageSink (tee it with the ledger's sink)
	lcfg.Processes = members // region.ProcessCounter
	lim, err = region.New(memstore.New(nil), limit.StaticPlans{Default: limit.Plan{Rate: 100, Capacity: 100}}, lcfg)
	if err != nil {
		log.Fatal(err)
	}

	if err := members.Start(); err != nil {
		log.Fatal(err)
	}
	defer members.Stop()
	if err := node.Start(); err != nil {
		log.Fatal(err)
	}
	defer node.Stop(context.Background())
	// ... go lim.Run(ctx); serve /v1/allow; /debug/shares → node.Snapshot();
	// GET /v1/keys/{key} → node.Shares(key).
}
