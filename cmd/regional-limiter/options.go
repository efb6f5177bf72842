package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/internal/tracing"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/membership"
	"github.com/quotaplatform/quota/region"
)

// Options are the daemon's settings; the "Flags" section of README.md in this
// directory is their reference. Every flag also reads env QUOTA_<FLAG> (upper
// case, dashes to underscores), and --config names an optional file of
// `flag = value` lines. Precedence: command line, then environment, then
// config file, then the default.
type Options struct {
	Region       string
	Listen       string
	Redis        string
	RedisCluster bool

	// GRPCListen is the address of Envoy's rate limit service (gRPC);
	// empty: off. RLSConfig is its envoyproxy/ratelimit YAML (a file or a
	// directory), or "catalog:" for the rules stored in the catalogue,
	// required with it; RLSResponseHeaders: its answers carry rate limit
	// response headers.
	GRPCListen         string
	RLSConfig          string
	RLSResponseHeaders bool

	NATS string
	// NATSAuth is how the process authenticates to --nats: the role's user
	// and password, or a credentials file, and TLS.
	NATSAuth edge.NATSAuth
	// ControlPlane: this process may write the catalogue (PUT and DELETE
	// of /v1/limits, /v1/keys, /v1/costs). Always true with embedded NATS;
	// with --nats only with --control-plane, and its NATS user must hold
	// the control-plane role. Usage stream and catalogue bucket settings
	// apply when this process creates them.
	ControlPlane        bool
	UsageStreamReplicas int
	UsageStreamMaxBytes int64
	CatalogReplicas     int
	// UsageStreamCluster and CatalogCluster are the NATS clusters (region
	// names) the usage stream and the catalogue bucket are placed in when
	// this process creates them; empty: where this process is connected.
	UsageStreamCluster string
	CatalogCluster     string

	DataDir string
	// AdminToken, CheckToken and ReadToken are bearer tokens as given
	// (CheckToken and ReadToken are bearer.ParseList lists); they print
	// without their secrets.
	AdminToken edge.Secret
	CheckToken edge.Secret
	ReadToken  edge.Secret
	ProcessID  string

	// ShutdownDelay is how long the daemon keeps serving, with /readyz
	// failing, between SIGTERM and closing its listener. Default 5s.
	ShutdownDelay time.Duration
	// DrainTimeout bounds waiting for the HTTP requests (after
	// ShutdownDelay) and, next, the gRPC calls in flight at shutdown, each.
	// Default 10s.
	DrainTimeout time.Duration
	// FlushTimeout is the limiter's drain and the ledger reporter's final
	// reports' own budget at shutdown, after the listeners are drained
	// (participant.Options.FlushTimeout). Default 10s.
	FlushTimeout time.Duration

	Window         time.Duration
	ReportInterval time.Duration
	StoreTimeout   time.Duration
	Processes      int
	// IdempotencyHorizon is how long the region's store remembers a
	// request id (region.Config.IdempotencyHorizon). Default 24h.
	IdempotencyHorizon time.Duration
	// GCPercent is the garbage collector's GOGC (applyGCPercent): a
	// collection when the heap has grown this many percent since the
	// last. GOGC in the environment wins. Default 400.
	GCPercent int

	GossipInterval time.Duration
	// Regions is --regions as given; regionSet (modules.go) derives the
	// region set from it, --region-weights and --nats.
	Regions        string
	RegionWeights  string
	ShareFloor     float64
	MemberlistBind string
	MemberlistJoin string
	// MemberlistKey is --memberlist-key as given (membership.ParseKeys);
	// it prints without its secret.
	MemberlistKey edge.Secret

	LogLevel string

	// UsageEncoding is --usage-encoding: "batch" (ledger.EncodingBatch) or
	// "json" (one report per message, for reconcilers older than batches).
	UsageEncoding string
	// HotKeyMetrics is --hotkey-metrics: how many of the fleet's hottest
	// keys /metrics shows by rank (no key in a label). Default 0.
	HotKeyMetrics int
	// OTLPEndpoint is --otlp-endpoint: the OTLP/HTTP collector traces go
	// to; empty: tracing off.
	OTLPEndpoint string

	// ClockSkew offsets this process's wall clock, for tests of clock skew
	// (the multi-region harness). Default 0.
	ClockSkew time.Duration

	// DefaultRate and DefaultCapacity are the built-in default plan, used for
	// keys with no assignment while the catalogue has no "default" plan.
	// Both 0 disable it. With --redis (several processes share limits) it
	// is off unless either flag is given (command line, environment or
	// config file): parseOptions sets both to 0 then.
	DefaultRate     float64
	DefaultCapacity float64

	Config string
}

func defaultProcessID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// flagSet declares every flag on o.
func flagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("regional-limiter", flag.ContinueOnError)
	fs.StringVar(&o.Region, "region", "local", "region name")
	fs.StringVar(&o.Listen, "listen", ":8080", "HTTP listen address")
	fs.StringVar(&o.GRPCListen, "grpc-listen", "", "gRPC address of Envoy's rate limit service (envoy.service.ratelimit.v3), with health and reflection; empty = off")
	fs.StringVar(&o.RLSConfig, "rls-config", "", "envoyproxy/ratelimit configuration YAML for --grpc-listen: a file, or a directory of *.yaml files, reloaded on change; or catalog: for the domains stored in the catalogue (PUT /v1/rls/{domain}), pushed to every process")
	fs.BoolVar(&o.RLSResponseHeaders, "rls-response-headers", false, "rate limit service answers carry RateLimit-*, X-RateLimit-* and RateLimit-Policy response headers")
	fs.StringVar(&o.Redis, "redis", "", "Redis URL (redis://[:password@]host:port/db, rediss:// for TLS); empty = in-process store")
	fs.BoolVar(&o.RedisCluster, "redis-cluster", false, "treat --redis as a comma-separated list of Redis Cluster seed URLs")
	fs.StringVar(&o.NATS, "nats", "", "NATS URL (comma-separated list allowed); empty = embedded NATS server with JetStream in --data-dir")
	fs.StringVar(&o.NATSAuth.User, "nats-user", "", "NATS user (its role: limiter-<region>, or control-plane with --control-plane); needs --nats-password")
	fs.Var(&o.NATSAuth.Password, "nats-password", "password of --nats-user (use the environment: QUOTA_NATS_PASSWORD)")
	fs.StringVar(&o.NATSAuth.Creds, "nats-creds", "", "NATS credentials file (JWT auth), instead of --nats-user")
	fs.StringVar(&o.NATSAuth.TLSCA, "nats-tls-ca", "", "NATS TLS CA certificate file")
	fs.StringVar(&o.NATSAuth.TLSCert, "nats-tls-cert", "", "NATS TLS client certificate file")
	fs.StringVar(&o.NATSAuth.TLSKey, "nats-tls-key", "", "NATS TLS client key file")
	fs.BoolVar(&o.ControlPlane, "control-plane", false, "this process writes the catalogue (its NATS user needs the control-plane role); always on with embedded NATS")
	fs.IntVar(&o.UsageStreamReplicas, "usage-stream-replicas", 1, "replicas of the usage stream when this process creates it: only with embedded NATS (elsewhere the reconciler creates it, and usage waits in the spool until it exists)")
	fs.Int64Var(&o.UsageStreamMaxBytes, "usage-stream-max-bytes", 1<<30, "byte limit of the usage stream when this process creates it (embedded NATS only); a full stream refuses new reports, which wait in the spool")
	fs.StringVar(&o.UsageStreamCluster, "usage-stream-cluster", "", "the NATS cluster (region name) the usage stream is placed in when this process creates it (embedded NATS only); empty = where this process is connected")
	fs.IntVar(&o.CatalogReplicas, "catalog-replicas", 1, "replicas of the catalogue bucket when this process creates it")
	fs.StringVar(&o.CatalogCluster, "catalog-cluster", "", "the NATS cluster (region name) the catalogue bucket is placed in when this process creates it; the deploy sets the ledger region; empty = where this process is connected")
	fs.StringVar(&o.DataDir, "data-dir", "./data", "data directory: embedded NATS store, catalogue cache, usage spool")
	fs.Var(&o.AdminToken, "admin-token", "control-plane bearer token (writes and reads); empty disables control-plane writes")
	fs.Var(&o.CheckToken, "check-token", "bearer tokens of POST /v1/allow and /v1/allow/batch, comma-separated (rotation); empty leaves the check API open")
	fs.Var(&o.ReadToken, "read-token", "bearer tokens for reads (GET /v1/keys, /v1/limits, /v1/costs, ?history=1, /debug/), comma-separated; the admin token reads too")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", 5*time.Second, "on SIGTERM, fail /readyz and keep serving this long before closing the listener")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", 10*time.Second, "at shutdown, after --shutdown-delay, how long the HTTP requests in flight and then the gRPC calls may take to finish (each); past it they are cut")
	fs.DurationVar(&o.FlushTimeout, "flush-timeout", 10*time.Second, "at shutdown, after the listeners are drained, the budget of the limiter's last flush and the final usage reports (to JetStream, or the spool): never spent by the drains")
	fs.StringVar(&o.ProcessID, "process-id", defaultProcessID(), "process identity in usage reports")
	fs.DurationVar(&o.Window, "window", 60*time.Second, "accounting window")
	fs.DurationVar(&o.ReportInterval, "report-interval", 5*time.Second, "usage report interval")
	fs.DurationVar(&o.StoreTimeout, "store-timeout", 5*time.Millisecond, "hard timeout of one store call")
	fs.IntVar(&o.Processes, "processes", 1, "estimate of the limiter processes sharing the region's store")
	fs.IntVar(&o.GCPercent, "gc-percent", defaultGCPercent, "the garbage collector's GOGC: collect when the heap has grown this many percent since the last collection (Go's default is 100); fewer collections shorten the check latency's tail for more memory, bounded by GOMEMLIMIT; GOGC in the environment wins")
	fs.DurationVar(&o.IdempotencyHorizon, "idempotency-horizon", region.DefaultIdempotencyHorizon, "how long the region's store remembers a request_id (checks, refunds, charges): the same id within it is charged once")
	fs.DurationVar(&o.GossipInterval, "gossip-interval", time.Second, "cross-region demand gossip interval")
	fs.StringVar(&o.Regions, "regions", "", "every region sharing limits over gossip, comma-separated, this one included; default: the regions of --region-weights, or --region alone with embedded NATS (required with --nats otherwise)")
	fs.StringVar(&o.RegionWeights, "region-weights", "", "historical region weights, e.g. eu=0.5,us=0.3,ap=0.2 (one for every region of --regions)")
	fs.Float64Var(&o.ShareFloor, "share-floor", 0.05, "smallest share of a key's limit a region keeps")
	fs.StringVar(&o.MemberlistBind, "memberlist-bind", "", "memberlist host:port; empty = membership off")
	fs.StringVar(&o.MemberlistJoin, "memberlist-join", "", "comma-separated memberlist host:port to join")
	fs.Var(&o.MemberlistKey, "memberlist-key", "memberlist encryption key: base64 of 16, 24 or 32 bytes; comma-separated for rotation (the first encrypts, all decrypt); empty = plaintext")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.Float64Var(&o.DefaultRate, "default-rate", 100, "built-in default plan rate (cost units per second) for keys with no plan while the catalogue has no \"default\" plan; 0 disables; off with --redis unless given")
	fs.Float64Var(&o.DefaultCapacity, "default-capacity", 200, "built-in default plan capacity (burst, cost units); 0 disables; off with --redis unless given")
	fs.StringVar(&o.Config, "config", "", "optional `file` of flag = value lines, read after flags and environment")
	fs.DurationVar(&o.ClockSkew, "clock-skew", 0, "testing: offset this process's wall clock by this much")
	fs.StringVar(&o.UsageEncoding, "usage-encoding", "batch", "how usage reports travel to the ledger: batch (many per message, compressed) or json (one per message, all a reconciler older than batches reads; upgrade reconcilers first)")
	fs.IntVar(&o.HotKeyMetrics, "hotkey-metrics", 0, "export the fleet's hottest keys' demand share, admitted rate and this region's share on /metrics, this many by rank (no key in a label; GET /v1/hotkeys names them); 0 to 100")
	fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "OTLP/HTTP collector URL for traces of the slow work (store calls, catalogue writes and pushes, report publishing), e.g. http://otel-collector:4318; empty: tracing off")
	return fs
}

// Bounds of --shutdown-delay.
const maxShutdownDelay = 5 * time.Minute

// envPrefix is the prefix of every flag's environment variable:
// --report-interval reads QUOTA_REPORT_INTERVAL.
const envPrefix = "QUOTA"

// parseOptions reads args, then the process environment, then the config
// file, with ff: a flag given on the command line is not read from the
// environment, and one given on either is not read from the file. An empty
// environment variable counts as unset.
func parseOptions(args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flagSet(&o)
	fs.SetOutput(stderr)
	err := ff.Parse(fs, args,
		ff.WithEnvVarPrefix(envPrefix),
		ff.WithConfigFileFlag("config"),
		ff.WithConfigFileParser(configFileParser(fs, &o.Config)),
	)
	var pathErr *iofs.PathError
	if errors.As(err, &pathErr) && pathErr.Path == o.Config {
		return Options{}, fmt.Errorf("--config: %w", err) // ff opens the file itself
	}
	if err != nil {
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.implicitDefaults(setFlags(fs))
	return o, o.validate()
}

// setFlags names the flags given on the command line, in the environment
// or in the config file: ff sets those through the FlagSet, which Visit
// then lists, and leaves the others at their defaults.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// implicitDefaults applies the defaults that depend on other flags: with
// --redis, several processes share limits, so no key gets a plan nobody
// wrote unless --default-rate or --default-capacity is given; with embedded
// NATS the process is its own control plane.
func (o *Options) implicitDefaults(set map[string]bool) {
	if o.Redis != "" && !set["default-rate"] && !set["default-capacity"] {
		o.DefaultRate, o.DefaultCapacity = 0, 0
	}
	if o.NATS == "" {
		o.ControlPlane = true // the embedded server is this process's own
	}
}

// configFileParser is the ff.ConfigFileParser of the --config file, which ff
// calls once flags and environment are parsed, when *path is final. Each
// line is `flag = value`: spaces around both are trimmed, a leading -- on
// the flag is allowed, and a value starting with a double quote is a Go
// string literal. Blank lines and lines starting with # are skipped; there
// are no comments after a value (a value may contain #). An unknown flag, a
// line without =, or a bad value is an error naming the file, line and flag.
func configFileParser(fs *flag.FlagSet, path *string) ff.ConfigFileParser {
	return func(r io.Reader, set func(name, value string) error) error {
		sc := bufio.NewScanner(r)
		for n := 1; sc.Scan(); n++ {
			name, value, ok, err := parseConfigLine(sc.Text())
			if err != nil {
				return fmt.Errorf("config file %s:%d: %w", *path, n, err)
			}
			if !ok {
				continue
			}
			// ff would also accept the environment name (QUOTA_WINDOW);
			// the file's format is flag names only.
			if fs.Lookup(name) == nil {
				return fmt.Errorf("config file %s:%d: unknown flag %q", *path, n, name)
			}
			if err := set(name, value); err != nil {
				// ff's error says "error setting flag ... from config
				// file: <cause>"; say it as the command line would.
				if cause := errors.Unwrap(err); cause != nil {
					err = cause
				}
				return fmt.Errorf("config file %s:%d: invalid value %q for flag --%s: %w", *path, n, value, name, err)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("config file %s: %w", *path, err)
		}
		return nil
	}
}

// parseConfigLine splits one config file line into flag name and value; ok
// is false for a blank or comment line.
func parseConfigLine(line string) (name, value string, ok bool, err error) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return "", "", false, nil
	}
	name, value, found := strings.Cut(line, "=")
	name = strings.TrimLeft(strings.TrimSpace(name), "-")
	if !found || name == "" {
		return "", "", false, fmt.Errorf("want `flag = value`, got %q", line)
	}
	value = strings.TrimSpace(value)
	if strings.HasPrefix(value, `"`) {
		if uq, err := strconv.Unquote(value); err == nil {
			value = uq
		}
	}
	return name, value, true, nil
}

func (o *Options) validate() error {
	var errs []error
	check := func(ok bool, flagName, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{flagName}, args...)...))
		}
	}
	check(o.Region != "", "region", "must not be empty")
	check(o.Listen != "", "listen", "must not be empty")
	check(o.UsageEncoding == "batch" || o.UsageEncoding == "json", "usage-encoding", "must be batch or json, got %q", o.UsageEncoding)
	check(o.HotKeyMetrics >= 0 && o.HotKeyMetrics <= 100, "hotkey-metrics", "must be 0 to 100, got %d", o.HotKeyMetrics)
	if err := tracing.CheckEndpoint(o.OTLPEndpoint); err != nil {
		errs = append(errs, fmt.Errorf("--otlp-endpoint: %w", err))
	}
	check(o.GRPCListen == "" || o.RLSConfig != "", "grpc-listen", "needs --rls-config (the rate limit service's limits)")
	check(o.RLSConfig == "" || o.GRPCListen != "", "rls-config", "needs --grpc-listen (it configures the gRPC rate limit service)")
	check(!o.RLSResponseHeaders || o.GRPCListen != "", "rls-response-headers", "needs --grpc-listen")
	check(!o.RedisCluster || o.Redis != "", "redis-cluster", "needs --redis seed URLs")
	check(o.DataDir != "", "data-dir", "must not be empty")
	check(o.ProcessID != "", "process-id", "must not be empty")
	check(o.Window > 0, "window", "must be positive, got %v", o.Window)
	check(o.ReportInterval > 0, "report-interval", "must be positive, got %v", o.ReportInterval)
	check(o.StoreTimeout > 0, "store-timeout", "must be positive, got %v", o.StoreTimeout)
	check(o.Processes >= 1, "processes", "must be at least 1, got %d", o.Processes)
	check(o.IdempotencyHorizon >= time.Millisecond, "idempotency-horizon", "must be at least 1ms, got %v", o.IdempotencyHorizon)
	check(o.GCPercent >= 10 && o.GCPercent <= 10_000, "gc-percent", "must be in [10, 10000], got %d", o.GCPercent)
	check(o.GossipInterval > 0, "gossip-interval", "must be positive, got %v", o.GossipInterval)
	check(o.ShareFloor >= 0 && o.ShareFloor < 1, "share-floor", "must be in [0, 1), got %v", o.ShareFloor)
	if _, err := regionSet(*o); err != nil {
		errs = append(errs, err)
	}
	_, keyErr := membership.ParseKeys(string(o.MemberlistKey))
	check(keyErr == nil, "memberlist-key", "%v", keyErr)
	if err := o.NATSAuth.Validate(); err != nil {
		errs = append(errs, err)
	}
	check(o.NATS != "" || (o.NATSAuth == edge.NATSAuth{}), "nats-user", "and the other NATS client flags need --nats (the embedded server has no users)")
	check(o.UsageStreamReplicas >= 1 && o.UsageStreamReplicas <= 5, "usage-stream-replicas", "must be 1 to 5, got %d", o.UsageStreamReplicas)
	check(o.UsageStreamMaxBytes >= 1<<20, "usage-stream-max-bytes", "must be at least 1 MiB, got %d", o.UsageStreamMaxBytes)
	check(o.CatalogReplicas >= 1 && o.CatalogReplicas <= 5, "catalog-replicas", "must be 1 to 5, got %d", o.CatalogReplicas)
	for _, f := range []struct{ name, value string }{{"usage-stream-cluster", o.UsageStreamCluster}, {"catalog-cluster", o.CatalogCluster}} {
		err := ledger.CheckClusterName(f.value)
		check(err == nil, f.name, "%v", err)
	}
	check((o.DefaultRate == 0) == (o.DefaultCapacity == 0), "default-rate", "and --default-capacity must both be 0 (no built-in default plan) or both set")
	check(o.DefaultRate >= 0, "default-rate", "must not be negative, got %v", o.DefaultRate)
	check(o.DefaultCapacity == 0 || o.DefaultCapacity >= 1, "default-capacity", "must be 0 or at least 1, got %v", o.DefaultCapacity)
	check(o.ShutdownDelay >= 0 && o.ShutdownDelay <= maxShutdownDelay, "shutdown-delay", "must be 0 to %v, got %v", maxShutdownDelay, o.ShutdownDelay)
	check(o.DrainTimeout > 0 && o.DrainTimeout <= maxShutdownDelay, "drain-timeout", "must be positive and at most %v, got %v", maxShutdownDelay, o.DrainTimeout)
	check(o.FlushTimeout > 0 && o.FlushTimeout <= maxShutdownDelay, "flush-timeout", "must be positive and at most %v, got %v", maxShutdownDelay, o.FlushTimeout)
	for _, tf := range []struct {
		name string
		list edge.Secret
	}{{"check-token", o.CheckToken}, {"read-token", o.ReadToken}} {
		_, err := bearer.ParseList(string(tf.list))
		check(err == nil, tf.name, "%v", err)
	}
	var lvl slog.Level
	check(lvl.UnmarshalText([]byte(o.LogLevel)) == nil, "log-level", "must be debug, info, warn or error, got %q", o.LogLevel)
	return errors.Join(errs...)
}
