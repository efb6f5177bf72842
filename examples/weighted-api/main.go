// Command weighted-api is an example Go service that embeds a quota
// participant (package participant): a small JSON API with two endpoints of
// different weights, GET /v1/quotes/{symbol} (cost 1) and POST /v1/reports
// (cost 5), each decided in process by the region's limiter.
//
// With no flags it runs on embedded defaults (an in-process store and an
// embedded NATS server in --data-dir), as make run does for the daemon;
// with --redis, --nats and --regions it joins a real region, as a process
// of the fleet beside the daemons. See README.md in this directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/membership"
	"github.com/quotaplatform/quota/participant"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "weighted-api:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	s, err := startService(startCtx, cfg, log)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "weighted-api:", err)
		os.Exit(1)
	}
	<-ctx.Done()
	log.Info("stopping: draining the limiter and sending final usage reports")
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.stop(stopCtx); err != nil {
		fmt.Fprintln(os.Stderr, "weighted-api:", err)
		os.Exit(1)
	}
}

// config is the service's settings: its listen address and the
// participant's options.
type config struct {
	listen      string
	participant participant.Options
	// readTokens may read the operator routes (participant.MountOperatorRoutes);
	// none: those routes refuse every call.
	readTokens []string
}

// parseFlags reads the flags; their names are the daemon's
// (cmd/regional-limiter), so an operator configures both alike.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{participant: participant.DefaultOptions()}
	o := &cfg.participant
	var (
		regions, weights, join, key, natsPassword, readToken string
		rate, capacity                                       float64
	)
	fs := flag.NewFlagSet("weighted-api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.listen, "listen", ":8083", "HTTP listen address")
	fs.StringVar(&o.Region, "region", o.Region, "region name")
	fs.StringVar(&o.ProcessID, "process-id", o.ProcessID, "process identity in usage reports, gossip and memberlist")
	fs.StringVar(&o.DataDir, "data-dir", "./data/weighted-api", "data directory: embedded NATS store, catalogue cache, usage spool")
	fs.StringVar(&o.Redis, "redis", "", "the region's Redis URL; empty = in-process store (limits hold for this process only)")
	fs.StringVar(&o.NATSURL, "nats", "", "NATS URL; empty = embedded NATS server with JetStream in --data-dir")
	natsUser := fs.String("nats-user", "", "NATS user (role limiter-<region>); needs --nats-password or QUOTA_NATS_PASSWORD")
	fs.StringVar(&natsPassword, "nats-password", "", "password of --nats-user (prefer the environment: QUOTA_NATS_PASSWORD)")
	natsCreds := fs.String("nats-creds", "", "NATS credentials file, instead of --nats-user")
	fs.StringVar(&regions, "regions", "", "every region sharing limits, comma-separated, this one included (required with --nats unless --region-weights)")
	fs.StringVar(&weights, "region-weights", "", "historical region weights, e.g. eu=0.5,us=0.3,ap=0.2")
	fs.StringVar(&o.MemberlistBind, "memberlist-bind", "", "memberlist host:port; empty = membership off")
	fs.StringVar(&join, "memberlist-join", "", "comma-separated memberlist host:port to join")
	fs.StringVar(&key, "memberlist-key", "", "memberlist encryption key(s), base64 (prefer the environment: QUOTA_MEMBERLIST_KEY)")
	// The limiter's and the reporter's flags bind to their Configs in the
	// participant's Options, whose defaults are theirs; participant.Open
	// checks them, each error naming its field.
	fs.IntVar(&o.Limiter.ProcessEstimate, "processes", o.Limiter.ProcessEstimate, "estimate of the limiter processes sharing the region's store")
	fs.DurationVar(&o.Limiter.Window, "window", o.Limiter.Window, "accounting window")
	fs.DurationVar(&o.Ledger.ReportInterval, "report-interval", o.Ledger.ReportInterval, "usage report interval")
	fs.DurationVar(&o.Limiter.StoreTimeout, "store-timeout", o.Limiter.StoreTimeout, "hard timeout of one store call")
	fs.DurationVar(&o.GossipInterval, "gossip-interval", o.GossipInterval, "cross-region demand gossip period")
	fs.Float64Var(&o.ShareFloor, "share-floor", o.ShareFloor, "smallest share of a key a region keeps, in [0, 1)")
	fs.DurationVar(&o.Limiter.ClockOffset, "clock-skew", o.Limiter.ClockOffset, "shift this process's wall clock (tests of clock skew)")
	fs.StringVar(&readToken, "read-token", "", "bearer token(s), comma-separated, that may read the operator routes (GET /v1/keys/{key}, /debug/shares, …); prefer the environment: QUOTA_READ_TOKEN")
	fs.Float64Var(&rate, "default-rate", 10, "built-in default plan rate (cost units per second) for keys with no plan; 0 disables; off with --redis unless given")
	fs.Float64Var(&capacity, "default-capacity", 20, "built-in default plan capacity (burst); 0 disables; off with --redis unless given")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// With a shared Redis, no key gets a plan nobody wrote, as the daemon.
	if o.Redis != "" && !set["default-rate"] && !set["default-capacity"] {
		rate, capacity = 0, 0
	}
	o.DefaultPlan = limit.Plan{Rate: rate, Capacity: capacity}
	if natsPassword == "" {
		natsPassword = os.Getenv("QUOTA_NATS_PASSWORD")
	}
	if key == "" {
		key = os.Getenv("QUOTA_MEMBERLIST_KEY")
	}
	if readToken == "" {
		readToken = os.Getenv("QUOTA_READ_TOKEN")
	}
	var errs []error
	var err error
	if cfg.readTokens, err = bearer.ParseList(readToken); err != nil {
		errs = append(errs, fmt.Errorf("--read-token: %w", err))
	}
	if *natsUser != "" {
		o.NATSOptions = append(o.NATSOptions, nats.UserInfo(*natsUser, natsPassword))
	}
	if *natsCreds != "" {
		o.NATSOptions = append(o.NATSOptions, nats.UserCredentials(*natsCreds))
	}
	if len(o.NATSOptions) > 0 && o.NATSURL == "" {
		errs = append(errs, errors.New("--nats-user and --nats-creds need --nats (the embedded server has no users)"))
		o.NATSOptions = nil
	}
	if o.Regions, err = gossip.ParseRegions(regions); err != nil {
		errs = append(errs, fmt.Errorf("--regions: %w", err))
	}
	if o.RegionWeights, err = gossip.ParseWeights(weights); err != nil {
		errs = append(errs, fmt.Errorf("--region-weights: %w", err))
	}
	for _, j := range strings.Split(join, ",") {
		if j = strings.TrimSpace(j); j != "" {
			o.MemberlistJoin = append(o.MemberlistJoin, j)
		}
	}
	if o.MemberlistKeys, err = membership.ParseKeys(key); err != nil {
		errs = append(errs, fmt.Errorf("--memberlist-key: %w", err))
	}
	return cfg, errors.Join(errs...)
}
