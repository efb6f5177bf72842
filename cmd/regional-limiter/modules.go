package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/internal/limitmetrics"
	"github.com/quotaplatform/quota/internal/tracing"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/membership"
	"github.com/quotaplatform/quota/participant"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/rls"
)

// participantModule puts the daemon's participant (package participant:
// store, NATS, catalogue, gossip, membership, ledger reporter and limiter,
// started and stopped in the order that package fixes) into the graph, and
// its parts beside it for the HTTP and gRPC surfaces. The participant is
// one start hook and one stop hook: every hook built on it (the HTTP and
// gRPC servers) starts after it and stops before it, so the listeners close
// before the limiter drains.
//
// Usage sinks: the group "usage" holds the participant's own sinks (the
// ledger reporter, the gossip node) and any a module adds, e.g.
//
//	fx.Provide(fx.Annotate(newSink, fx.As(new(region.UsageSink)), fx.ResultTags(`group:"usage"`)))
//
// The participant's own are in the group, so the group cannot be an input
// of the participant: the others join it through extraUsage, filled by an
// invoke before any start hook runs, so before the limiter's first flush.
func participantModule() fx.Option {
	return fx.Options(
		fx.Provide(
			newExtraUsage,
			newTracerProvider,
			newParticipant,
			func(p *participant.Participant) *region.Limiter { return p.Limiter() },
			func(p *participant.Participant) region.Config { return p.LimiterConfig() },
			func(p *participant.Participant) *catalog.Catalog { return p.Catalog() },
			func(p *participant.Participant) *gossip.Node { return p.Gossip() },
			func(p *participant.Participant) *limitmetrics.Checks { return p.Checks() },
			func(p *participant.Participant) *nats.Conn { return p.NATS() },
			func(p *participant.Participant) jetstream.JetStream { return p.JetStream() },
			fx.Annotate(func(p *participant.Participant) region.UsageSink { return p.Reporter() }, fx.ResultTags(`group:"usage"`)),
			fx.Annotate(func(p *participant.Participant) region.UsageSink { return p.Gossip() }, fx.ResultTags(`group:"usage"`)),
			fx.Annotate((*participant.Participant).SharesHandler, fx.ResultTags(`name:"debug_shares"`)),
			fx.Annotate((*participant.Participant).HotKeysHandler, fx.ResultTags(`name:"hot_keys"`)),
		),
		fx.Invoke(joinUsage),
	)
}

type participantInputs struct {
	fx.In
	Options  Options
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Extra    *extraUsage
	Tracing  trace.TracerProvider
	// Rules are the rate limit service's (grpcModules), which answer their
	// keys in front of the catalogue.
	Rules *rls.Rules `optional:"true"`
}

// regionTracer is the tracer name the participant gives region.Limiter.
const regionTracer = "github.com/quotaplatform/quota/region"

// newTracerProvider exports spans over OTLP with --otlp-endpoint (nil, no
// spans, without). The participant is built on it, so its stop hook,
// which flushes the last spans, runs after the participant has closed.
func newTracerProvider(lc fx.Lifecycle, o Options) (trace.TracerProvider, error) {
	tp, shutdown, err := tracing.Setup(tracing.Config{Endpoint: o.OTLPEndpoint, Service: "quota-regional-limiter",
		Attributes: map[string]string{"quota.region": o.Region, "quota.process": o.ProcessID},
		// A store call is traced in its caller's trace only: as a trace of
		// its own, one per slow-path check, it cost 1.4 KB per check.
		CallerTraceOnly: []string{regionTracer}})
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	lc.Append(fx.StopHook(shutdown))
	return tp, nil
}

// newParticipant builds the participant from the flags; it starts and
// closes with the graph.
func newParticipant(lc fx.Lifecycle, in participantInputs) (*participant.Participant, error) {
	po, err := participantOptions(in.Options)
	if err != nil {
		return nil, err
	}
	po.Logger, po.Registerer, po.Usage = in.Logger, in.Registry, in.Extra
	po.TracerProvider = in.Tracing
	if in.Rules != nil {
		rules := in.Rules
		po.Plans = func(cat *catalog.Catalog) (region.PlanResolver, error) { return rls.NewPlans(rules, cat) }
	}
	p, err := participant.New(po)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if err := p.Start(ctx); err != nil {
				// fx stops only the hooks that started: this one did not.
				return fmt.Errorf("%w (close: %v)", err, p.Close(ctx))
			}
			return nil
		},
		OnStop: p.Close,
	})
	return p, nil
}

// participantOptions is the participant's Options the flags bound to,
// with the flags given as text parsed: those are checked by validate
// already, and errors here name the flag too.
func participantOptions(o Options) (participant.Options, error) {
	po := o.Options
	if o.NATSURL != "" {
		po.NATSOptions = o.NATSAuth.Options()
	}
	// The participant derives the region set from these (regionSet
	// checked them already, naming the flags).
	var err error
	if po.Regions, err = gossip.ParseRegions(o.RegionList); err != nil {
		return po, fmt.Errorf("--regions: %w", err)
	}
	if po.RegionWeights, err = gossip.ParseWeights(o.RegionWeightList); err != nil {
		return po, fmt.Errorf("--region-weights: %w", err)
	}
	po.MemberlistJoin = nil
	for _, j := range strings.Split(o.MemberlistJoinList, ",") {
		if j = strings.TrimSpace(j); j != "" {
			po.MemberlistJoin = append(po.MemberlistJoin, j)
		}
	}
	if po.MemberlistKeys, err = membership.ParseKeys(string(o.MemberlistKey)); err != nil {
		return po, fmt.Errorf("--memberlist-key: %w", err)
	}
	po.Ledger.Encoding = usageEncodings[o.UsageEncoding]
	return po, nil
}

// usageEncodings are --usage-encoding's values, and the ledger's encoding
// of each.
var usageEncodings = map[string]string{"batch": ledger.EncodingBatch, "json": ledger.EncodingJSON}

// usageEncodingName is the --usage-encoding value of a ledger encoding.
func usageEncodingName(encoding string) string {
	for name, e := range usageEncodings {
		if e == encoding {
			return name
		}
	}
	return encoding
}

// extraUsage is the usage sinks that modules add to the group "usage",
// handed every batch after the participant's own.
type extraUsage struct{ sinks []region.UsageSink }

func newExtraUsage() *extraUsage { return &extraUsage{} }

func (e *extraUsage) Record(batch []region.Usage) {
	for _, s := range e.sinks {
		s.Record(batch)
	}
}

type usageGroup struct {
	fx.In
	Usage []region.UsageSink `group:"usage"`
}

// joinUsage adds the group's sinks other than the participant's own to
// extra. It runs while the graph is built, before the limiter's loop
// starts, so the loop's reads of extra.sinks follow these writes.
func joinUsage(p *participant.Participant, extra *extraUsage, in usageGroup) {
	for _, s := range in.Usage {
		if s == region.UsageSink(p.Reporter()) || s == region.UsageSink(p.Gossip()) {
			continue
		}
		extra.sinks = append(extra.sinks, s)
	}
}

// regionSet is the set of regions whose limiters share every key's limit
// over gossip, by participant.RegionSet's rule, from --regions,
// --region-weights, --region and whether --nats is empty (embedded); its
// errors name the flags. The participant applies the same rule to the
// parsed flags (participantOptions), so this is only their check.
func regionSet(o Options) ([]string, error) {
	regions, err := gossip.ParseRegions(o.RegionList)
	if err != nil {
		return nil, fmt.Errorf("--regions: %w", err)
	}
	weights, err := gossip.ParseWeights(o.RegionWeightList)
	if err != nil {
		return nil, fmt.Errorf("--region-weights: %w", err)
	}
	return participant.RegionSet(o.Region, regions, weights, o.NATSURL == "", participant.RegionSetNames{
		Region: "--region", Regions: "--regions", RegionWeights: "--region-weights", NATS: "--nats"})
}
