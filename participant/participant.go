package participant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/internal/limitmetrics"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/membership"
	"github.com/quotaplatform/quota/region"
)

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("participant: closed")

// Participant is one process's membership of a region's limiter fleet: a
// region.Limiter on the region's store, fed by the catalogue, the gossip
// node and memberlist, and reporting to the ledger. Build it with New and
// Start it (or Open), stop it with Close.
type Participant struct {
	opts Options // validated copy
	log  *slog.Logger

	store    *regionStore
	nats     *natsLink
	cat      *catalog.Catalog
	node     *gossip.Node
	members  *membership.Membership // nil when Options.MemberlistBind is empty
	reporter *ledger.Reporter
	plans    region.PlanResolver
	limCfg   region.Config
	lim      *region.Limiter
	checks   *limitmetrics.Checks // nil without Options.Registerer
	// quotaBases is Options.QuotaBases or a quotabase.Client; nil with
	// embedded NATS.
	quotaBases region.QuotaBases

	// lifeMu serialises Start and Close, which may take seconds (the
	// catalogue wait, the drains); mu guards only state, so that Health
	// never waits for them.
	lifeMu sync.Mutex
	stops  []stopStep // guarded by lifeMu; what Start started, in order
	mu     sync.Mutex
	state  lifecycle // guarded by mu
}

// lifecycle is where a Participant is between New and Close.
type lifecycle int

const (
	built lifecycle = iota
	starting
	started
	closing
	closed
)

// reporterStep names the reporter's step: Close closes a reporter that
// Start did not get to, whose spool New opened.
const reporterStep = "ledger reporter"

// limiterStep names the limiter's step: it and reporterStep stop on
// Options.FlushTimeout, not on Close's ctx.
const limiterStep = "limiter"

// stopStep stops one part that Start started.
type stopStep struct {
	name string
	stop func(context.Context) error
}

// Open builds a participant and starts it: New, then Start. On a failed
// start it closes what it opened.
func Open(ctx context.Context, o Options) (*Participant, error) {
	p, err := New(o)
	if err != nil {
		return nil, err
	}
	if err := p.Start(ctx); err != nil {
		return nil, errors.Join(err, p.Close(ctx))
	}
	return p, nil
}

// New validates o and builds every part: the store client, the NATS
// connection (starting the embedded server when none is given), the gossip
// node, the catalogue (from its cached copy when there is one), the ledger
// reporter (opening its spool), membership and the limiter. It starts none
// of their loops, and waits neither for Redis nor for a remote NATS; only
// an embedded NATS server starts here, so that the other parts have a
// connection. Close releases what it opened.
func New(o Options) (*Participant, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.Regions, _ = o.RegionSet() // validated
	if o.embedded() {
		o.ControlPlane = true // the embedded server is this process's own
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &Participant{opts: o, log: o.Logger}
	if err := p.build(); err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

// build makes the parts in dependency order; release undoes what it made.
func (p *Participant) build() error {
	var err error
	if p.store, err = openStore(&p.opts, p.log); err != nil {
		return err
	}
	if p.nats, err = dialNATS(&p.opts, p.log); err != nil {
		return err
	}
	if p.quotaBases, err = newQuotaBases(&p.opts, p.nats); err != nil {
		return err
	}
	if p.node, err = newGossip(p); err != nil {
		return err
	}
	if p.cat, err = newCatalog(&p.opts, p.log); err != nil {
		return err
	}
	p.nats.OnReconnect(p.cat.Resync)
	if p.reporter, err = newReporter(&p.opts, p.nats.js, p.log); err != nil {
		return err
	}
	if p.opts.MemberlistBind != "" {
		if p.members, err = newMembership(&p.opts, p.log); err != nil {
			return err
		}
	}
	return p.buildLimiter()
}

// release closes what New opened, for a participant that never started.
func (p *Participant) release() {
	if p.reporter != nil {
		// Closes the spool; the limiter never ran, so there is no usage.
		_ = p.reporter.Close(context.Background())
	}
	if p.nats != nil {
		p.nats.close()
	}
	if p.store != nil {
		_ = p.store.close()
	}
}

// Start starts the parts in order: the gossip node (so that it hears the
// other regions from the first interval), the catalogue watch (waiting up
// to Options.CatalogSyncWait for a fresh catalogue; it never fails over
// NATS being away), the ledger reporter, membership, and last the
// limiter's loop, whose flushes feed the reporter and the gossip node. On
// an error, what started keeps running until Close.
func (p *Participant) Start(ctx context.Context) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	switch p.getState() {
	case started:
		return nil
	case starting: // Start holds lifeMu: an earlier one failed part way
		return errors.New("participant: an earlier Start failed; Close the participant")
	case closing, closed:
		return ErrClosed
	}
	p.setState(starting)
	steps := []struct {
		name  string
		start func(context.Context) (func(context.Context) error, error)
	}{
		{"gossip", p.startGossip},
		{"store", p.startStore},
		{"catalogue", p.startCatalogue},
		{reporterStep, p.startReporter},
		{"membership", p.startMembership},
		{limiterStep, p.startLimiter},
	}
	for _, s := range steps {
		stop, err := s.start(ctx)
		if err != nil {
			return fmt.Errorf("participant: start %s: %w", s.name, err)
		}
		if stop != nil {
			p.stops = append(p.stops, stopStep{s.name, stop})
		}
	}
	p.setState(started)
	return nil
}

func (p *Participant) getState() lifecycle {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

func (p *Participant) setState(s lifecycle) {
	p.mu.Lock()
	p.state = s
	p.mu.Unlock()
}

// Close stops what Start started, in reverse order: the limiter drains (it
// returns every lease and flushes its last usage into the reporter and the
// gossip node), membership leaves, the reporter sends a final report for
// every window (to JetStream, or to the spool), the catalogue watch and the
// gossip node stop; then the store client and the NATS connection close and
// the embedded server stops. The limiter's drain and the reporter's final
// reports share Options.FlushTimeout, counted from the drain's start and
// not cut short by ctx (a daemon's listeners may have spent it); ctx bounds
// the other steps. The reporter closes only after the limiter's last flush
// reached it. Every part is stopped even when one fails, and the errors
// are joined. Close is idempotent.
func (p *Participant) Close(ctx context.Context) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.getState() == closed {
		return nil
	}
	p.setState(closing)
	stops := p.stops
	p.stops = nil

	var errs []error
	reporterClosed := false
	// The limiter's last flush and the reporter's final reports run on a
	// budget of their own (Options.FlushTimeout), started at the first of
	// them: a caller that spent ctx draining its listeners (a slow request
	// in flight) must not cost the ledger its last usage.
	var flushCtx context.Context
	for i := len(stops) - 1; i >= 0; i-- {
		sctx := ctx
		if n := stops[i].name; n == limiterStep || n == reporterStep {
			if flushCtx == nil {
				var cancel context.CancelFunc
				flushCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), p.opts.FlushTimeout)
				defer cancel()
			}
			sctx = flushCtx
		}
		if err := stops[i].stop(sctx); err != nil {
			errs = append(errs, fmt.Errorf("participant: stop %s: %w", stops[i].name, err))
		}
		reporterClosed = reporterClosed || stops[i].name == reporterStep
	}
	if !reporterClosed {
		// Start did not get to the reporter: its spool is open all the
		// same, and the limiter never ran, so it has no usage to send.
		if err := p.reporter.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("participant: close %s: %w", reporterStep, err))
		}
	}
	if err := p.store.close(); err != nil {
		errs = append(errs, fmt.Errorf("participant: close Redis client: %w", err))
	}
	p.nats.close()
	p.setState(closed)
	return errors.Join(errs...)
}

// Limiter is the participant's limiter: Allow and AllowEndpoint decide in
// process.
func (p *Participant) Limiter() *region.Limiter { return p.lim }

// LimiterConfig is the configuration the limiter was built with.
func (p *Participant) LimiterConfig() region.Config { return p.limCfg }

// Plans is the limiter's plan resolver: the catalogue, or Options.Plans'.
func (p *Participant) Plans() region.PlanResolver { return p.plans }

// Catalog is the plan catalogue the limiter resolves plans and endpoint
// costs from; with Options.ControlPlane it also writes.
func (p *Participant) Catalog() *catalog.Catalog { return p.cat }

// Gossip is the gossip node: the region's shares of every key.
func (p *Participant) Gossip() *gossip.Node { return p.node }

// Reporter is the ledger reporter (a region.UsageSink of the limiter).
func (p *Participant) Reporter() *ledger.Reporter { return p.reporter }

// Membership is the region's memberlist membership, nil when it is off.
func (p *Participant) Membership() *membership.Membership { return p.members }

// NATS is the participant's NATS connection.
func (p *Participant) NATS() *nats.Conn { return p.nats.nc }

// JetStream is the JetStream context on NATS.
func (p *Participant) JetStream() jetstream.JetStream { return p.nats.js }

// Options are the options the participant runs with, defaults and derived
// values (the region set) filled in.
func (p *Participant) Options() Options { return p.opts }
