package participant

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/internal/field"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/membership"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/store"
)

// Options configure a Participant. Start from DefaultOptions; New validates
// a copy and reports every bad field at once, each error naming its field.
// The limiter's and the ledger reporter's settings are their own Configs
// (Limiter, Ledger), validated by their packages; the daemon's flags
// (cmd/regional-limiter) bind to these fields.
type Options struct {
	// Region is this process's region, a NATS subject token. Default "local".
	Region string
	// ProcessID names this process in usage reports, gossip and
	// memberlist; unique within the region. Default <hostname>-<pid>.
	ProcessID string
	// DataDir holds the catalogue's last known good copy (catalog.json),
	// the usage spool (spool/) and, with embedded NATS, its JetStream store
	// (nats/). Required; default "./data".
	DataDir string
	// Name is how the participant introduces itself: its NATS connection
	// is "<Name> <Region> <ProcessID>", its Redis client "<Name>-<ProcessID>".
	// Default "quota-participant".
	Name string

	// Redis is the region's store: a Redis URL (redis://[:password@]host:port/db,
	// rediss:// for TLS), or with RedisCluster a comma-separated list of
	// Redis Cluster seed URLs. Empty (and Store nil): an in-process store,
	// whose limits hold for this process only. Default "".
	Redis        string
	RedisCluster bool
	// Store, when set, is the region's store instead of Redis; the caller
	// closes what it holds. Default nil.
	Store store.Store

	// NATS, when set, is the caller's connection; the participant neither
	// drains nor closes it. NATSURL, with NATS nil, is dialed with
	// NATSOptions (credentials and TLS: nats.UserInfo, nats.UserCredentials,
	// nats.RootCAs, nats.ClientCert) after the process's inbox prefix
	// (natsrole.Inbox of natsrole.LimiterProcess(Region, ProcessID), or of
	// natsrole.ControlPlane), which the shipped NATS configuration requires: a
	// caller's connection must be dialed with it too. Dialing never blocks
	// on an unreachable server, it keeps retrying. Both empty: an embedded
	// NATS server with JetStream in DataDir/nats, which nothing outside the
	// process can reach. Default: embedded.
	NATS        *nats.Conn
	NATSURL     string
	NATSOptions []nats.Option
	// ControlPlane: this process may write the catalogue (its NATS user
	// needs the control-plane role) and creates the catalogue bucket when
	// missing. Always true with embedded NATS. Default false.
	ControlPlane bool
	// CatalogReplicas and CatalogCluster shape the catalogue bucket when
	// this process creates it. A cluster is a NATS cluster (region) name;
	// empty: wherever this process is connected. Defaults 1, "".
	CatalogReplicas int
	CatalogCluster  string
	// CatalogSyncWait is how long Start waits for a fresh catalogue from
	// NATS before serving from the cached copy (or DefaultPlan); 100 ms at
	// most while NATS is not connected. Start never fails over it.
	// Default 3s.
	CatalogSyncWait time.Duration
	// DefaultPlan is the built-in default plan, for keys with no assignment
	// while the catalogue holds no "default" plan. Zero: none, and such keys
	// have no plan (ErrNoPlan). Default zero: with a shared Redis, nobody
	// should get a plan nobody wrote.
	DefaultPlan region.Plan

	// Regions names every region sharing each key's limit over gossip, this
	// one included. Empty: the regions of RegionWeights; with neither, the
	// participant's own region alone, which only an embedded NATS allows
	// (a real one may be joined to other regions', and a process that
	// counted only its own region would take every key's whole limit).
	Regions []string
	// RegionWeights are historical region weights for a cold start; empty
	// (equal weights) or one for every region of Regions. Default none.
	RegionWeights map[string]float64
	// ShareFloor is the smallest share of a key a region keeps
	// (gossip.Config.Floor), in (0, 0.5]. Default 0.05.
	ShareFloor float64
	// GossipInterval is the cross-region demand gossip period. Default 1s.
	GossipInterval time.Duration

	// MemberlistBind is memberlist's host:port (port 0: a free one); empty
	// leaves membership off, and Processes is the process count.
	// MemberlistJoin lists members to join; MemberlistKeys encrypt its
	// traffic (membership.ParseKeys); without keys it is plaintext.
	MemberlistBind string
	MemberlistJoin []string
	MemberlistKeys []membership.Key

	// Limiter configures the limiter (region.Config, its defaults). The
	// participant sets Region, Clock, Tracer, Usage, Shares, Costs,
	// Processes, QuotaBases and Observer itself; ClockOffset also shifts
	// the ledger reporter's clock. Its FlushInterval is how often usage
	// reaches the reporter and the gossip node.
	Limiter region.Config
	// Ledger configures the ledger reporter (ledger.Config, its defaults):
	// ReportInterval, Encoding (ledger.EncodingJSON for reconcilers older
	// than batching), Stream's Replicas, MaxBytes and Cluster when this
	// process creates the usage stream (only with embedded NATS; elsewhere
	// the reconciler creates it, and the process spools until it exists).
	// The participant sets Region, ProcessID, Window (Limiter.Window),
	// SpoolDir (DataDir/spool), CreateStream, Clock, Logger, Metrics and
	// Tracer itself.
	Ledger ledger.Config

	// FlushTimeout bounds the limiter's drain and the ledger reporter's
	// final reports at Close, counted from when the limiter's drain
	// begins. It is their own budget: Close's ctx, which a daemon may have
	// spent draining its listeners, does not cut it short, so that the
	// last usage always reaches an open reporter. Default 10s.
	FlushTimeout time.Duration

	// Clock, when set, is the time source of the limiter, the reporter and
	// the gossip node (tests pass a clock.Manual). Nil: the system clock,
	// and the limiter decides on the coarse clock its loop keeps, which
	// reading a Clock on every decision would forgo. Default nil.
	Clock clock.Clock

	// Logger receives the parts' events. Default slog.Default().
	Logger *slog.Logger
	// Registerer, when set, gets every part's metrics (limiter, catalogue
	// version, ledger reporter, gossip; limitmetrics lists them), so one
	// registerer serves one participant. Default nil: no metrics.
	Registerer prometheus.Registerer
	// Usage, when set, gets every usage batch after the reporter and the
	// gossip node; it must not modify the batch, which they share.
	Usage region.UsageSink
	// Plans, when set, builds the limiter's plan resolver from the
	// catalogue, e.g. other rules in front of it. Default: the catalogue.
	Plans func(*catalog.Catalog) (region.PlanResolver, error)

	// HotKeyMetrics is how many of the fleet's hottest keys the Registerer
	// gets by rank (gossip.Config.HotKeyMetrics; no key in a label), in
	// [0, 100]. Default 0.
	HotKeyMetrics int
	// TracerProvider, when set, gets spans of the slow work: store calls
	// (children of the decision's context), catalogue writes and pushes,
	// report publishing. Default nil: no tracing.
	TracerProvider trace.TracerProvider
	// QuotaBases, when set, is where quota bases are read from
	// (docs/design.md [quotas]). Nil: on NATS or NATSURL, a
	// quotabase.Client on the participant's connection, which the
	// reconcilers answer on "quota.base"; with embedded NATS, none.
	// Default nil.
	QuotaBases region.QuotaBases
}

// DefaultOptions returns the documented defaults: an in-process store, an
// embedded NATS server, one region, no built-in default plan. The
// settings a part owns take that part's default (region, gossip, ledger,
// catalog DefaultConfig), so each is written once.
func DefaultOptions() Options {
	lim, shares, cat := region.DefaultConfig(), gossip.DefaultConfig(), catalog.DefaultConfig()
	return Options{
		Region:          lim.Region,
		ProcessID:       defaultProcessID(),
		DataDir:         "./data",
		Name:            "quota-participant",
		CatalogReplicas: cat.Replicas,
		CatalogSyncWait: 3 * time.Second,
		ShareFloor:      shares.Floor,
		GossipInterval:  shares.Interval,
		Limiter:         lim,
		Ledger:          ledger.DefaultConfig(),
		FlushTimeout:    10 * time.Second,
	}
}

func defaultProcessID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// embedded reports whether the participant runs its own NATS server.
func (o *Options) embedded() bool { return o.NATS == nil && o.NATSURL == "" }

// RegionSet is the set of regions sharing every key's limit: Regions, or
// the regions of RegionWeights (given both, they must name the same
// regions), or Region alone with embedded NATS. It must hold Region. The
// rule is RegionSet's; errors name these fields.
func (o *Options) RegionSet() ([]string, error) {
	regions, err := RegionSet(o.Region, o.Regions, o.RegionWeights, o.embedded(), RegionSetNames{
		Region: "Region", Regions: "Regions", RegionWeights: "RegionWeights", NATS: "NATS or NATSURL"})
	if err != nil {
		return nil, fmt.Errorf("participant: %w", err)
	}
	return regions, nil
}

// RegionSetNames are what RegionSet's errors call its inputs: the fields
// of Options, or the flags of a command that sets them.
type RegionSetNames struct {
	Region, Regions, RegionWeights string
	// NATS names what connects to a NATS server that is not embedded.
	NATS string
}

// RegionSet is the rule for the set of regions whose limiters share every
// key's limit over gossip, this one (own) included: regions, or the
// regions of weights (given both, they must name the same regions). With
// neither, it is own alone when NATS is embedded (no other process can be
// heard), and an error otherwise: a NATS server may be joined to other
// regions' by gateways, and a process that counted only its own region
// would take every key's whole limit. The result holds own; errors name
// the inputs as names says.
func RegionSet(own string, regions []string, weights map[string]float64, embedded bool, names RegionSetNames) ([]string, error) {
	weighed := make([]string, 0, len(weights))
	for r := range weights {
		weighed = append(weighed, r)
	}
	sort.Strings(weighed)
	regions = slices.Clone(regions)
	switch {
	case len(regions) > 0 && len(weighed) > 0:
		given := slices.Clone(regions)
		sort.Strings(given)
		if !slices.Equal(given, weighed) {
			return nil, fmt.Errorf("%s and %s disagree: %s names %s, %s %s; weigh every region of %s, or give only one of them",
				names.Regions, names.RegionWeights, names.Regions, strings.Join(given, ","), names.RegionWeights, strings.Join(weighed, ","), names.Regions)
		}
	case len(weighed) > 0:
		regions = weighed
	case len(regions) > 0:
	case embedded:
		regions = []string{own}
	default:
		return nil, fmt.Errorf("%s: required with %s (its servers may be joined to other regions'): name every region sharing limits, this one included, or give %s; a single-region deployment gives %s %s",
			names.Regions, names.NATS, names.RegionWeights, names.Regions, own)
	}
	if !slices.Contains(regions, own) {
		return nil, fmt.Errorf("%s: must include %s %q, got %s", names.Regions, names.Region, own, strings.Join(regions, ","))
	}
	return regions, nil
}

// Validate checks o whole and joins an error per bad field, each a
// *field.Error (internal/field) naming it: the limiter's and the
// reporter's settings are checked by region and ledger, as the
// participant would configure them, and named under Limiter and Ledger
// (those the participant sets from another field, by that field).
func (o *Options) Validate() error {
	ch := field.Check{Prefix: "participant: "}
	check := ch.That
	check(o.ProcessID != "", "ProcessID", "must not be empty")
	check(o.DataDir != "", "DataDir", "must not be empty")
	check(o.Name != "", "Name", "must not be empty")
	check(!o.RedisCluster || o.Redis != "", "RedisCluster", "needs Redis seed URLs")
	check(o.Store == nil || o.Redis == "", "Store", "and Redis are exclusive: give one store")
	check(o.NATS == nil || o.NATSURL == "", "NATS", "and NATSURL are exclusive: give a connection or a URL")
	check(len(o.NATSOptions) == 0 || o.NATSURL != "", "NATSOptions", "need NATSURL (the embedded server has no users; a given connection has its own options)")
	check(o.CatalogReplicas >= 1 && o.CatalogReplicas <= 5, "CatalogReplicas", "must be 1 to 5, got %d", o.CatalogReplicas)
	err := ledger.CheckClusterName(o.CatalogCluster)
	check(err == nil, "CatalogCluster", "%v", err)
	check(o.CatalogSyncWait >= 0, "CatalogSyncWait", "must not be negative, got %v", o.CatalogSyncWait)
	if o.DefaultPlan != (region.Plan{}) {
		check(o.DefaultPlan.Rate > 0, "DefaultPlan.Rate", "must be positive (or the whole plan zero), got %v", o.DefaultPlan.Rate)
		check(o.DefaultPlan.Capacity >= 1, "DefaultPlan.Capacity", "must be at least 1 (or the whole plan zero), got %v", o.DefaultPlan.Capacity)
	}
	if regions, err := o.RegionSet(); err != nil {
		ch.Add(&field.Error{Path: "Regions", Err: err})
	} else {
		// The gossip settings are gossip's to check.
		gcfg := o.gossipConfig(regions)
		ch.Add(field.Map("participant: ", gcfg.Validate(), func(p string) string {
			return fromOption("Gossip", p, map[string]string{"Region": "Region", "Process": "ProcessID",
				"Interval": "GossipInterval", "Floor": "ShareFloor", "HotKeyMetrics": "HotKeyMetrics",
				"Regions": "Regions", "Weights": "RegionWeights"})
		}))
	}
	if o.MemberlistBind != "" {
		_, _, err := membership.SplitHostPort(o.MemberlistBind)
		check(err == nil, "MemberlistBind", "%v", err)
	}
	check(o.MemberlistBind != "" || len(o.MemberlistJoin) == 0, "MemberlistJoin", "needs MemberlistBind (membership is off without it)")
	check(o.MemberlistBind != "" || len(o.MemberlistKeys) == 0, "MemberlistKeys", "need MemberlistBind (membership is off without it)")
	check(o.FlushTimeout > 0, "FlushTimeout", "must be positive, got %v", o.FlushTimeout)
	lim, rep := o.limiterConfig(), o.ledgerConfig()
	ch.Add(field.Map("participant: ", lim.Validate(), func(p string) string {
		return fromOption("Limiter", p, map[string]string{"Region": "Region"})
	}))
	ch.Add(field.Map("participant: ", rep.Validate(), func(p string) string {
		return fromOption("Ledger", p, map[string]string{"Region": "Region", "ProcessID": "ProcessID",
			"Window": "Limiter.Window", "SpoolDir": "DataDir"})
	}))
	return ch.Err()
}

// fromOption is the Options path of a field of the Config held as holder:
// set names the fields the participant sets from another option.
func fromOption(holder, path string, set map[string]string) string {
	if p, ok := set[path]; ok {
		return p
	}
	return holder + "." + path
}
