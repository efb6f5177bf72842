package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
)

// Options are the daemon's settings (see /work/notes/flags.md and the README
// in this directory). Every flag also reads env QUOTA_<FLAG>, and --config
// names an optional file of `flag = value` lines. Precedence: command line,
// then environment, then config file, then the default.
type Options struct {
	Region       string
	Listen       string
	Redis        string
	RedisCluster bool

	NATS        string
	NATSCreds   string
	NATSTLSCA   string
	NATSTLSCert string
	NATSTLSKey  string

	DataDir    string
	AdminToken string
	ProcessID  string

	Window         time.Duration
	ReportInterval time.Duration
	StoreTimeout   time.Duration
	Processes      int

	GossipInterval time.Duration
	RegionWeights  string
	ShareFloor     float64
	MemberlistBind string
	MemberlistJoin string

	LogLevel string

	// ClockSkew offsets this process's wall clock, for tests of clock skew
	// (the multi-region harness). Default 0.
	ClockSkew time.Duration

	// DefaultRate and DefaultCapacity are the built-in default plan, used for
	// keys with no assignment while the catalogue has no "default" plan.
	// Both 0 disable it.
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
	fs.StringVar(&o.Redis, "redis", "", "Redis URL (redis://[:password@]host:port/db, rediss:// for TLS); empty = in-process store")
	fs.BoolVar(&o.RedisCluster, "redis-cluster", false, "treat --redis as a comma-separated list of Redis Cluster seed URLs")
	fs.StringVar(&o.NATS, "nats", "", "NATS URL (comma-separated list allowed); empty = embedded NATS server with JetStream in --data-dir")
	fs.StringVar(&o.NATSCreds, "nats-creds", "", "NATS credentials file")
	fs.StringVar(&o.NATSTLSCA, "nats-tls-ca", "", "NATS TLS CA certificate file")
	fs.StringVar(&o.NATSTLSCert, "nats-tls-cert", "", "NATS TLS client certificate file")
	fs.StringVar(&o.NATSTLSKey, "nats-tls-key", "", "NATS TLS client key file")
	fs.StringVar(&o.DataDir, "data-dir", "./data", "data directory: embedded NATS store, catalogue cache, usage spool")
	fs.StringVar(&o.AdminToken, "admin-token", "", "control-plane bearer token; empty disables control-plane writes")
	fs.StringVar(&o.ProcessID, "process-id", defaultProcessID(), "process identity in usage reports")
	fs.DurationVar(&o.Window, "window", 60*time.Second, "accounting window")
	fs.DurationVar(&o.ReportInterval, "report-interval", 5*time.Second, "usage report interval")
	fs.DurationVar(&o.StoreTimeout, "store-timeout", 5*time.Millisecond, "hard timeout of one store call")
	fs.IntVar(&o.Processes, "processes", 1, "estimate of the limiter processes sharing the region's store")
	fs.DurationVar(&o.GossipInterval, "gossip-interval", time.Second, "cross-region demand gossip interval")
	fs.StringVar(&o.RegionWeights, "region-weights", "", "historical region weights, e.g. eu=0.5,us=0.3,ap=0.2")
	fs.Float64Var(&o.ShareFloor, "share-floor", 0.05, "smallest share of a key's limit a region keeps")
	fs.StringVar(&o.MemberlistBind, "memberlist-bind", "", "memberlist host:port; empty = membership off")
	fs.StringVar(&o.MemberlistJoin, "memberlist-join", "", "comma-separated memberlist host:port to join")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.Float64Var(&o.DefaultRate, "default-rate", 100, "built-in default plan rate (cost units per second) for keys with no plan while the catalogue has no \"default\" plan; 0 disables")
	fs.Float64Var(&o.DefaultCapacity, "default-capacity", 200, "built-in default plan capacity (burst, cost units); 0 disables")
	fs.StringVar(&o.Config, "config", "", "optional file of `flag = value` lines")
	fs.DurationVar(&o.ClockSkew, "clock-skew", 0, "testing: offset this process's wall clock by this much")
	return fs
}

// envName is the environment variable of a flag: QUOTA_ and the name in
// upper case with dashes as underscores.
func envName(flagName string) string {
	return "QUOTA_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseOptions reads args, then getenv, then the config file.
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flagSet(&o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["config"] {
		if v := getenv(envName("config")); v != "" {
			o.Config = v
		}
	}
	var file map[string]string
	if o.Config != "" {
		var err error
		if file, err = readConfigFile(o.Config); err != nil {
			return Options{}, err
		}
		for name := range file {
			if fs.Lookup(name) == nil {
				return Options{}, fmt.Errorf("config file %s: unknown flag %q", o.Config, name)
			}
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || f.Name == "config" {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("env %s: %w", envName(f.Name), err))
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("config file %s: %s: %w", o.Config, f.Name, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return Options{}, err
	}
	return o, o.validate()
}

// readConfigFile reads `flag = value` lines; blank lines and lines starting
// with # are skipped, a leading -- on the name is allowed, and the value
// may be in double quotes.
func readConfigFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("config file %s:%d: want `flag = value`, got %q", path, n, line)
		}
		name = strings.TrimLeft(strings.TrimSpace(name), "-")
		value = strings.TrimSpace(value)
		if uq, err := strconv.Unquote(value); err == nil && strings.HasPrefix(value, `"`) {
			value = uq
		}
		out[name] = value
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return out, nil
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
	check(!o.RedisCluster || o.Redis != "", "redis-cluster", "needs --redis seed URLs")
	check(o.DataDir != "", "data-dir", "must not be empty")
	check(o.ProcessID != "", "process-id", "must not be empty")
	check(o.Window > 0, "window", "must be positive, got %v", o.Window)
	check(o.ReportInterval > 0, "report-interval", "must be positive, got %v", o.ReportInterval)
	check(o.StoreTimeout > 0, "store-timeout", "must be positive, got %v", o.StoreTimeout)
	check(o.Processes >= 1, "processes", "must be at least 1, got %d", o.Processes)
	check(o.GossipInterval > 0, "gossip-interval", "must be positive, got %v", o.GossipInterval)
	check(o.ShareFloor >= 0 && o.ShareFloor < 1, "share-floor", "must be in [0, 1), got %v", o.ShareFloor)
	check((o.NATSTLSCert == "") == (o.NATSTLSKey == ""), "nats-tls-cert", "needs --nats-tls-key and the other way round")
	check((o.DefaultRate == 0) == (o.DefaultCapacity == 0), "default-rate", "and --default-capacity must both be 0 (no built-in default plan) or both set")
	check(o.DefaultRate >= 0, "default-rate", "must not be negative, got %v", o.DefaultRate)
	check(o.DefaultCapacity == 0 || o.DefaultCapacity >= 1, "default-capacity", "must be 0 or at least 1, got %v", o.DefaultCapacity)
	var lvl slog.Level
	check(lvl.UnmarshalText([]byte(o.LogLevel)) == nil, "log-level", "must be debug, info, warn or error, got %q", o.LogLevel)
	return errors.Join(errs...)
}
