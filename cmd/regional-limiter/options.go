package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/participant"
	"github.com/quotaplatform/quota/region"
)

// Options are the daemon's settings, each declared once in declare
// (settings.go): its flag, default, help and check; the "Flags" section of
// README.md in this directory is generated from it. Every flag also reads
// env QUOTA_<FLAG> (upper case, dashes to underscores), and --config names
// an optional file of `flag = value` lines. Precedence: command line, then
// environment, then config file, then the default.
//
// The participant's settings are its Options, which hold the limiter's and
// the reporter's Configs: a flag binds to the field it sets, takes its
// default from it, and is checked by the package that owns it
// (participant.Options.Validate). The fields below are the daemon's own,
// and the flags given as text that newParticipant parses.
type Options struct {
	participant.Options

	Listen string

	// GRPCListen is the address of Envoy's rate limit service (gRPC);
	// empty: off. RLSConfig is its envoyproxy/ratelimit YAML (a file or a
	// directory), or "catalog:" for the rules stored in the catalogue,
	// required with it; RLSResponseHeaders: its answers carry rate limit
	// response headers.
	GRPCListen         string
	RLSConfig          string
	RLSResponseHeaders bool

	// NATSAuth is how the process authenticates to --nats: the role's user
	// and password, or a credentials file, and TLS.
	NATSAuth edge.NATSAuth

	// AdminToken, CheckToken and ReadToken are bearer tokens as given
	// (CheckToken and ReadToken are bearer.ParseList lists); they print
	// without their secrets.
	AdminToken edge.Secret
	CheckToken edge.Secret
	ReadToken  edge.Secret

	// ShutdownDelay is how long the daemon keeps serving, with /readyz
	// failing, between SIGTERM and closing its listener. Default 5s.
	ShutdownDelay time.Duration
	// DrainTimeout bounds waiting for the HTTP requests (after
	// ShutdownDelay) and, next, the gRPC calls in flight at shutdown, each.
	// Default 10s.
	DrainTimeout time.Duration
	// GCPercent is the garbage collector's GOGC (applyGCPercent): a
	// collection when the heap has grown this many percent since the
	// last. GOGC in the environment wins. Default 400.
	GCPercent int

	// RegionList is --regions as given, RegionWeightList --region-weights;
	// the region set follows from them and --nats by
	// participant.RegionSet's rule (regionSet checks it naming the flags).
	RegionList       string
	RegionWeightList string
	// MemberlistJoinList is --memberlist-join as given.
	MemberlistJoinList string
	// MemberlistKey is --memberlist-key as given (membership.ParseKeys);
	// it prints without its secret.
	MemberlistKey edge.Secret

	LogLevel string

	// UsageEncoding is --usage-encoding: "batch" (ledger.EncodingBatch) or
	// "json" (one report per message, for reconcilers older than batches).
	UsageEncoding string
	// OTLPEndpoint is --otlp-endpoint: the OTLP/HTTP collector traces go
	// to; empty: tracing off.
	OTLPEndpoint string

	Config string
}

// errUnexpectedArgs: the command line holds more than flags (the daemon
// has no commands but help).
var errUnexpectedArgs = errors.New("unexpected arguments")

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
	o := defaultOptions()
	s := declare(&o)
	fs := s.FlagSet()
	fs.SetOutput(stderr)
	fs.Usage = func() { printUsage(stderr, s) }
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
		return Options{}, fmt.Errorf("%w %q", errUnexpectedArgs, fs.Args())
	}
	o.implicitDefaults(setFlags(fs))
	checked, across := s.Check(), o.validate()
	if across != nil {
		return o, errors.Join(checked, across)
	}
	// The participant's settings are checked by their owners, once the
	// flags given as text are parsed (their own checks above name them);
	// the errors name the flags bound to the fields.
	if po, err := participantOptions(o); err == nil {
		checked = errors.Join(checked, s.Explain(po.Validate()))
	}
	return o, checked
}

// defaultOptions are the Options before any flag is read: the
// participant's defaults, which the flags bound to them take as theirs.
func defaultOptions() Options {
	o := Options{Options: participant.DefaultOptions()}
	o.Name = "regional-limiter"
	return o
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
		o.DefaultPlan = region.Plan{}
	}
	if o.NATSURL == "" {
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

// validate checks what involves several settings (declare checks each
// alone), joining an error per bad setting, each naming its flag.
func (o *Options) validate() error {
	var errs []error
	check := func(ok bool, flagName, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{flagName}, args...)...))
		}
	}
	check(o.GRPCListen == "" || o.RLSConfig != "", "grpc-listen", "needs --rls-config (the rate limit service's limits)")
	check(o.RLSConfig == "" || o.GRPCListen != "", "rls-config", "needs --grpc-listen (it configures the gRPC rate limit service)")
	check(!o.RLSResponseHeaders || o.GRPCListen != "", "rls-response-headers", "needs --grpc-listen")
	if _, err := regionSet(*o); err != nil {
		errs = append(errs, err)
	}
	if err := o.NATSAuth.Validate(); err != nil {
		errs = append(errs, err)
	}
	check(o.NATSURL != "" || (o.NATSAuth == edge.NATSAuth{}), "nats-user", "and the other NATS client flags need --nats (the embedded server has no users)")
	check((o.DefaultPlan.Rate == 0) == (o.DefaultPlan.Capacity == 0), "default-rate", "and --default-capacity must both be 0 (no built-in default plan) or both set")
	return errors.Join(errs...)
}
