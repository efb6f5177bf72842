package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/membership"
	"github.com/quotaplatform/quota/region"
)

// regionModules wires the ledger reporter, gossip and membership into the
// limiter. Each joins the graph through the limiter config's optional
// inputs (see appOptions): the reporter and the gossip node as usage sinks,
// the gossip node as the share source, membership as the process counter.
//
// Stop order: fx stops hooks in reverse order of start, and these are built
// before the limiter, so the limiter drains (returns leases, flushes its
// last usage into the reporter and the gossip node) before they stop.
func regionModules(o Options) fx.Option {
	opts := []fx.Option{
		fx.Provide(fx.Annotate(newReporter, fx.As(new(region.UsageSink)), fx.ResultTags(`group:"usage"`))),
		fx.Provide(
			newGossip,
			func(n *gossip.Node) region.ShareSource { return n },
			fx.Annotate(func(n *gossip.Node) region.UsageSink { return n }, fx.ResultTags(`group:"usage"`)),
			fx.Annotate(newDebugShares, fx.ResultTags(`name:"debug_shares"`)),
		),
		fx.Invoke(linkGossip),
	}
	if o.MemberlistBind != "" {
		opts = append(opts, fx.Provide(fx.Annotate(newMembership, fx.As(new(region.ProcessCounter)))))
	}
	return fx.Options(opts...)
}

// newReporter reports this process's usage to the ledger stream, spooling
// to <data-dir>/spool while NATS is unreachable.
func newReporter(lc fx.Lifecycle, o Options, js jetstream.JetStream, clk clock.Clock,
	reg *prometheus.Registry, log *slog.Logger) (*ledger.Reporter, error) {
	cfg := ledger.DefaultConfig()
	cfg.Region = o.Region
	cfg.ProcessID = o.ProcessID
	cfg.Window = o.Window
	cfg.ReportInterval = o.ReportInterval
	cfg.SpoolDir = filepath.Join(o.DataDir, "spool")
	cfg.Stream.Replicas, cfg.Stream.MaxBytes = o.UsageStreamReplicas, o.UsageStreamMaxBytes
	cfg.Stream.Cluster = o.UsageStreamCluster
	cfg.Clock = clk
	cfg.Logger = log.With("component", "ledger")
	cfg.Stream.Logger = cfg.Logger
	cfg.Metrics = ledger.NewMetrics(reg)
	rep, err := ledger.NewReporter(js, cfg)
	if err != nil {
		return nil, fmt.Errorf("ledger reporter: %w", err)
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { rep.Start(); return nil },
		OnStop: func(ctx context.Context) error {
			if err := rep.Close(ctx); err != nil {
				return fmt.Errorf("ledger reporter: final reports: %w", err)
			}
			return nil
		},
	})
	return rep, nil
}

// gossipLink lets the gossip node reach the limiter, which is built after
// it (the limiter's config takes the node as its share source).
type gossipLink struct{ lim *region.Limiter }

func newGossip(lc fx.Lifecycle, o Options, nc *nats.Conn, reg *prometheus.Registry, log *slog.Logger) (*gossip.Node, *gossipLink, error) {
	link := &gossipLink{}
	cfg := gossip.DefaultConfig()
	cfg.Region = o.Region
	cfg.Process = gossipProcessName(o.ProcessID)
	cfg.Interval = o.GossipInterval
	cfg.Floor = o.ShareFloor
	regions, err := regionSet(o)
	if err != nil {
		return nil, nil, err
	}
	cfg.Regions = regions
	if o.RegionWeights != "" {
		w, err := gossip.ParseWeights(o.RegionWeights)
		if err != nil {
			return nil, nil, fmt.Errorf("--region-weights: %w", err)
		}
		cfg.Weights = w
	}
	cfg.Registerer = reg
	cfg.Logger = log
	// The callbacks run on the node's goroutine, which starts after the
	// limiter exists (linkGossip runs before any OnStart hook).
	cfg.OnChange = func(key string) { link.lim.Reshare(key) }
	cfg.OnChangeAll = func() { link.lim.InvalidateAll() }
	cfg.Flush = func() { link.lim.Flush() }
	node, err := gossip.New(nc, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("gossip: %w", err)
	}
	log.Info("gossip region set", "regions", regions)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return node.Start() },
		OnStop:  node.Stop,
	})
	return node, link, nil
}

// regionSet is the set of regions whose limiters share every key's limit
// over gossip, this one included: --regions, or the regions of
// --region-weights (given both, they must name the same regions). With
// neither, it is --region alone when NATS is embedded (--nats empty: no
// other process can be heard), and an error with --nats, whose servers may
// be joined to other regions' by gateways: a process that counted only its
// own region would take every key's whole limit.
func regionSet(o Options) ([]string, error) {
	regions, err := gossip.ParseRegions(o.Regions)
	if err != nil {
		return nil, fmt.Errorf("--regions: %w", err)
	}
	weights, err := gossip.ParseWeights(o.RegionWeights)
	if err != nil {
		return nil, fmt.Errorf("--region-weights: %w", err)
	}
	weighed := make([]string, 0, len(weights))
	for r := range weights {
		weighed = append(weighed, r)
	}
	sort.Strings(weighed)
	switch {
	case len(regions) > 0 && len(weights) > 0:
		given := append([]string(nil), regions...)
		sort.Strings(given)
		if !slices.Equal(given, weighed) {
			return nil, fmt.Errorf("--regions and --region-weights disagree: --regions names %s, --region-weights %s; weigh every region of --regions, or drop one of the flags",
				strings.Join(given, ","), strings.Join(weighed, ","))
		}
	case len(weights) > 0:
		regions = weighed
	case len(regions) > 0:
	case o.NATS == "":
		regions = []string{o.Region}
	default:
		return nil, fmt.Errorf("--regions: required with --nats (its servers may be joined to other regions'): name every region sharing limits, this one included (--regions eu,us,ap), or give --region-weights; a single-region deployment gives --regions %s", o.Region)
	}
	if !slices.Contains(regions, o.Region) {
		return nil, fmt.Errorf("--regions: must include --region %q, got %s", o.Region, strings.Join(regions, ","))
	}
	return regions, nil
}

// gossipProcessName makes a process id a NATS subject token.
func gossipProcessName(id string) string {
	return strings.NewReplacer(".", "_", "*", "_", ">", "_", " ", "_").Replace(id)
}

func linkGossip(link *gossipLink, lim *region.Limiter) { link.lim = lim }

// newDebugShares serves /debug/shares: every key's shares per region, each
// region's gossip age, and whether shares are frozen.
func newDebugShares(node *gossip.Node) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if key := r.URL.Query().Get("key"); key != "" {
			_ = json.NewEncoder(w).Encode(map[string]any{"key": key, "shares": node.Shares(key)})
			return
		}
		_ = json.NewEncoder(w).Encode(node.Snapshot())
	})
}

// newMembership joins the region's memberlist cluster; its live count
// feeds the limiter's lease caps and degraded floors.
func newMembership(lc fx.Lifecycle, o Options, log *slog.Logger) (*membership.Membership, error) {
	host, port, err := membership.SplitHostPort(o.MemberlistBind)
	if err != nil {
		return nil, fmt.Errorf("--memberlist-bind: %w", err)
	}
	cfg := membership.DefaultConfig()
	cfg.NodeName = o.ProcessID
	cfg.BindAddr, cfg.BindPort = host, port
	for _, j := range strings.Split(o.MemberlistJoin, ",") {
		if j = strings.TrimSpace(j); j != "" {
			cfg.Join = append(cfg.Join, j)
		}
	}
	if cfg.Keys, err = membership.ParseKeys(string(o.MemberlistKey)); err != nil {
		return nil, fmt.Errorf("--memberlist-key: %w", err)
	}
	if len(cfg.Keys) == 0 {
		log.Warn("no --memberlist-key: memberlist traffic is plaintext and unauthenticated; anyone who reaches --memberlist-bind can join and change the process count")
	}
	cfg.Logger = log.With("component", "membership")
	cfg.OnChange = func(n int) { log.Info("region membership changed", "processes", n) }
	m, err := membership.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return m.Start() },
		OnStop:  func(context.Context) error { return m.Stop() },
	})
	return m, nil
}
