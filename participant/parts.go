package participant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/internal/limitmetrics"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/membership"
	"github.com/quotaplatform/quota/region"
)

// newGossip builds the gossip node. It is built before the limiter, whose
// config takes it as the share source; its callbacks reach the limiter
// through p, and run on the node's goroutine, which Start starts after the
// limiter exists.
func newGossip(p *Participant) (*gossip.Node, error) {
	o := &p.opts
	cfg := o.gossipConfig(o.Regions)
	cfg.Registerer = o.Registerer
	cfg.Logger = p.log
	cfg.Clock = o.Clock
	// A region's gossiped claims for a key count up to MaxClaim × the
	// key's rate; the catalogue exists by the time the node ticks.
	cfg.Rate = func(key string) float64 {
		plan, err := p.cat.Plan(key)
		if err != nil {
			return 0
		}
		return plan.Rate
	}
	cfg.OnChange = func(key string) { p.lim.Reshare(key) }
	cfg.OnChangeAll = func() { p.lim.InvalidateAll() }
	cfg.Flush = func() { p.lim.Flush() }
	node, err := gossip.New(p.nats.nc, cfg)
	if err != nil {
		return nil, fmt.Errorf("participant: gossip: %w", err)
	}
	p.log.Info("gossip region set", "regions", o.Regions)
	return node, nil
}

// gossipConfig is the gossip node's configuration from the options, on
// the region set regions; newGossip adds the callbacks.
func (o *Options) gossipConfig(regions []string) gossip.Config {
	cfg := gossip.DefaultConfig()
	cfg.Region = o.Region
	cfg.Process = gossipProcessName(o.ProcessID)
	cfg.Interval = o.GossipInterval
	cfg.Floor = o.ShareFloor
	cfg.Regions = regions
	if len(o.RegionWeights) > 0 {
		cfg.Weights = o.RegionWeights
	}
	cfg.HotKeyMetrics = o.HotKeyMetrics
	return cfg
}

// gossipProcessName makes a process id a NATS subject token.
func gossipProcessName(id string) string {
	return strings.NewReplacer(".", "_", "*", "_", ">", "_", " ", "_").Replace(id)
}

// newCatalog loads the last known good catalogue from DataDir; Start
// watches the bucket.
func newCatalog(o *Options, log *slog.Logger) (*catalog.Catalog, error) {
	cfg := catalog.DefaultConfig()
	if o.TracerProvider != nil {
		cfg.Tracer = o.TracerProvider.Tracer("github.com/quotaplatform/quota/catalog")
	}
	cfg.CachePath = filepath.Join(o.DataDir, "catalog.json")
	cfg.Replicas, cfg.Cluster, cfg.ReadOnly = o.CatalogReplicas, o.CatalogCluster, !o.ControlPlane
	cfg.DefaultPlan = o.DefaultPlan
	if o.DefaultPlan == (region.Plan{}) {
		log.Info("no built-in default plan: a key with no plan assignment has no plan (404 from the check API) until a \"default\" plan is written")
	}
	cfg.Logger = log
	cat, err := catalog.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("participant: catalogue: %w", err)
	}
	return cat, nil
}

// wallClock is the clock the reporter stamps wall time with: Options.Clock
// or the system clock, shifted by Limiter.ClockOffset.
func wallClock(o *Options, log *slog.Logger) clock.Clock {
	c := o.Clock
	if c == nil {
		c = clock.System()
	}
	if o.Limiter.ClockOffset == 0 {
		return c
	}
	if log != nil {
		log.Warn("wall clock skewed for testing", "clock_skew", o.Limiter.ClockOffset)
	}
	return shiftedClock{Clock: c, by: o.Limiter.ClockOffset}
}

// shiftedClock is a clock whose readings are shifted by a fixed amount.
// Time.Add keeps the monotonic reading, so durations are unaffected; its
// tickers and timers are the underlying clock's.
type shiftedClock struct {
	clock.Clock
	by time.Duration
}

func (c shiftedClock) Now() time.Time { return c.Clock.Now().Add(c.by) }

// ledgerConfig is Options.Ledger with what the participant sets: the
// region, process, window and spool, and where the stream is created.
// newReporter adds the clock, logger, metrics and tracer.
func (o *Options) ledgerConfig() ledger.Config {
	cfg := o.Ledger
	cfg.Region = o.Region
	cfg.ProcessID = o.ProcessID
	cfg.Window = o.Limiter.Window
	cfg.SpoolDir = filepath.Join(o.DataDir, "spool")
	if o.DataDir == "" {
		cfg.SpoolDir = ""
	}
	// Only the reconciler's role creates the usage stream; an embedded
	// server is this process's own and has no reconciler, so the process
	// creates it there, and the usage waits in it (make run).
	cfg.CreateStream = o.embedded()
	return cfg
}

// newReporter reports this process's usage to the ledger stream, spooling
// to DataDir/spool while NATS is unreachable or the stream missing.
func newReporter(o *Options, js jetstream.JetStream, log *slog.Logger) (*ledger.Reporter, error) {
	cfg := o.ledgerConfig()
	cfg.Clock = wallClock(o, log)
	cfg.Logger = log.With("component", "ledger")
	cfg.Stream.Logger = cfg.Logger
	cfg.Metrics = ledger.NewMetrics(o.Registerer) // nil: kept, not registered
	if o.TracerProvider != nil {
		cfg.Tracer = o.TracerProvider.Tracer("github.com/quotaplatform/quota/ledger")
	}
	rep, err := ledger.NewReporter(js, cfg)
	if err != nil {
		return nil, fmt.Errorf("participant: ledger reporter: %w", err)
	}
	return rep, nil
}

// newMembership joins the region's memberlist cluster at Start; its live
// count feeds the limiter's lease caps and degraded floors.
func newMembership(o *Options, log *slog.Logger) (*membership.Membership, error) {
	host, port, err := membership.SplitHostPort(o.MemberlistBind)
	if err != nil {
		return nil, fmt.Errorf("participant: MemberlistBind: %w", err)
	}
	cfg := membership.DefaultConfig()
	cfg.NodeName = o.ProcessID
	cfg.BindAddr, cfg.BindPort = host, port
	cfg.Join = append([]string(nil), o.MemberlistJoin...)
	cfg.Keys = o.MemberlistKeys
	if len(cfg.Keys) == 0 {
		log.Warn("no memberlist key: memberlist traffic is plaintext and unauthenticated; anyone who reaches the memberlist address can join and change the process count")
	}
	cfg.Logger = log.With("component", "membership")
	cfg.OnChange = func(n int) { log.Info("region membership changed", "processes", n) }
	m, err := membership.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("participant: membership: %w", err)
	}
	return m, nil
}

// buildLimiter builds the limiter on the plans (the catalogue, or
// Options.Plans'), with the reporter, the gossip node and Options.Usage as
// usage sinks, gossip as the share source and membership as the process
// counter, and subscribes it to catalogue changes, which end the leases of
// the keys they touch.
func (p *Participant) buildLimiter() error {
	o := &p.opts
	p.plans = region.PlanResolver(p.cat)
	if o.Plans != nil {
		plans, err := o.Plans(p.cat)
		if err != nil {
			return fmt.Errorf("participant: Plans: %w", err)
		}
		p.plans = plans
	}
	cfg := o.limiterConfig()
	cfg.Costs = p.cat
	if o.TracerProvider != nil {
		cfg.Tracer = o.TracerProvider.Tracer("github.com/quotaplatform/quota/region")
	}
	sinks := usageFanout{p.reporter, p.node}
	if o.Usage != nil {
		sinks = append(sinks, o.Usage)
	}
	cfg.Usage = sinks
	cfg.Shares = p.node
	if p.quotaBases != nil {
		// A nil interface when there is none: the limiter counts quotas
		// from its region's store alone.
		cfg.QuotaBases = p.quotaBases
	}
	if p.members != nil {
		cfg.Processes = p.members
	}
	if o.Registerer != nil {
		obs := limitmetrics.NewObserver()
		if err := o.Registerer.Register(obs); err != nil {
			return fmt.Errorf("participant: metrics: %w", err)
		}
		cfg.Observer = obs
		checks := limitmetrics.NewChecks()
		if err := o.Registerer.Register(checks); err != nil {
			return fmt.Errorf("participant: metrics: %w", err)
		}
		p.checks = checks
	}
	lim, err := region.New(p.store.store, p.plans, cfg)
	if err != nil {
		return fmt.Errorf("participant: limiter: %w", err)
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(limitmetrics.NewCollector(lim, p.cat)); err != nil {
			return fmt.Errorf("participant: metrics: %w", err)
		}
	}
	p.cat.Subscribe(lim)
	p.lim, p.limCfg = lim, cfg
	return nil
}

// limiterConfig is Options.Limiter with what the participant sets from
// its other options; buildLimiter adds the parts it is built on.
func (o *Options) limiterConfig() region.Config {
	cfg := o.Limiter
	cfg.Region = o.Region
	// A nil Clock is the only way to the coarse decision clock; the
	// limiter applies ClockOffset to its wall readings itself.
	cfg.Clock = o.Clock
	cfg.Usage, cfg.Shares, cfg.Costs, cfg.Processes, cfg.QuotaBases, cfg.Observer, cfg.Tracer = nil, nil, nil, nil, nil, nil, nil
	return cfg
}

// usageFanout hands every usage batch to several sinks, in order. Sinks
// must not modify the batch: they share it.
type usageFanout []region.UsageSink

func (f usageFanout) Record(batch []region.Usage) {
	for _, s := range f {
		s.Record(batch)
	}
}

// RecordDurable hands batch to every sink, and returns once the durable
// ones (the ledger reporter) hold it durably: the limiter calls it for
// refunds and charges before answering them.
func (f usageFanout) RecordDurable(ctx context.Context, batch []region.Usage) error {
	var errs []error
	for _, s := range f {
		if d, ok := s.(region.DurableUsageSink); ok {
			errs = append(errs, d.RecordDurable(ctx, batch))
		} else {
			s.Record(batch)
		}
	}
	return errors.Join(errs...)
}

func (p *Participant) startGossip(context.Context) (func(context.Context) error, error) {
	if err := p.node.Start(); err != nil {
		return nil, err
	}
	return p.node.Stop, nil
}

func (p *Participant) startStore(ctx context.Context) (func(context.Context) error, error) {
	p.store.ping(ctx, p.log)
	return nil, nil
}

// startCatalogue starts the watch and serves with a fresh catalogue when
// NATS answers quickly; it never fails the start over NATS (the cached
// copy, or the built-in default, serves until the watch catches up).
func (p *Participant) startCatalogue(ctx context.Context) (func(context.Context) error, error) {
	if err := p.cat.Start(p.nats.js); err != nil {
		return nil, err
	}
	stop := func(context.Context) error { p.cat.Stop(); return nil }
	wait := p.opts.CatalogSyncWait
	if !p.nats.nc.IsConnected() {
		wait = min(wait, 100*time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := p.cat.WaitSynced(wctx); err != nil {
		p.log.Warn("starting without a fresh catalogue", "err", err, "loaded_from_cache", p.cat.Loaded())
	}
	return stop, nil
}

func (p *Participant) startReporter(context.Context) (func(context.Context) error, error) {
	p.reporter.Start()
	return func(ctx context.Context) error {
		if err := p.reporter.Close(ctx); err != nil {
			return fmt.Errorf("final reports: %w", err)
		}
		return nil
	}, nil
}

func (p *Participant) startMembership(context.Context) (func(context.Context) error, error) {
	if p.members == nil {
		return nil, nil
	}
	if err := p.members.Start(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return p.members.Stop() }, nil
}

// startLimiter runs the limiter's loop until Close, which cancels it and
// waits: the loop returns every lease and flushes usage as it ends. When
// the drain outlasts the stop's ctx (a store that hangs while leases are
// returned), the stop flushes the usage itself before returning, so that
// the reporter, closed next, holds every spent unit.
func (p *Participant) startLimiter(context.Context) (func(context.Context) error, error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.lim.Run(ctx); err != nil {
			p.log.Error("limiter loop failed", "err", err)
		}
	}()
	return func(stopCtx context.Context) error {
		cancel()
		select {
		case <-done:
			p.log.Info("limiter drained: leases returned, usage flushed")
			return nil
		case <-stopCtx.Done():
			p.lim.Flush()
			return fmt.Errorf("drain: %w", stopCtx.Err())
		}
	}, nil
}
