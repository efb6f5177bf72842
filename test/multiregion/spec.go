package multiregion

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"
)

// Mode is the form of the scenarios: Short for CI, Full on demand.
type Mode string

// The modes, from env QUOTA_MULTIREGION.
const (
	ModeOff   Mode = ""
	ModeShort Mode = "short"
	ModeFull  Mode = "full"
)

// ModeFromEnv reads QUOTA_MULTIREGION: "short" (or "1", "true") and "full";
// anything else is ModeOff.
func ModeFromEnv() Mode {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("QUOTA_MULTIREGION"))) {
	case "short", "1", "true", "ci":
		return ModeShort
	case "full":
		return ModeFull
	}
	return ModeOff
}

// Spec describes a cluster. Start from DefaultSpec.
type Spec struct {
	// Regions names the regions. Default eu, us, ap.
	Regions []string
	// Processes is the number of limiter processes per region. Default 2.
	Processes int
	// Weights are the historical region weights passed as
	// --region-weights; they sum to 1. Default eu 0.5, us 0.3, ap 0.2.
	Weights map[string]float64
	// CrossRegionRTT is the round trip added to every NATS gateway link
	// (half each way). Default 80ms.
	CrossRegionRTT time.Duration

	// Window is the accounting window (--window). Default 10s.
	Window time.Duration
	// ReportInterval is --report-interval. Default 1s.
	ReportInterval time.Duration
	// GossipInterval is --gossip-interval. Default 200ms.
	GossipInterval time.Duration
	// StoreTimeout is --store-timeout. Default 20ms, not the daemon's 5 ms:
	// six limiters, their Redis and NATS servers and the load share two
	// cores here, and a scheduling stall past the timeout would put keys
	// in degraded mode with no fault injected.
	StoreTimeout time.Duration
	// ShutdownDelay is --shutdown-delay: how long a limiter keeps serving
	// after SIGTERM with /readyz answering 503, so that clients routing on
	// /readyz move away before its HTTP server closes. Default 0 (the
	// daemon's own default is 5s): a stop is immediate, which keeps the
	// restarts of the fault scenarios short.
	ShutdownDelay time.Duration
	// ShareFloor is --share-floor (a region's least share). Default 0.05.
	ShareFloor float64
	// MinLocalShare and FloorFraction are the limiter's degraded-mode floor
	// constants (region.DefaultConfig; the daemon has no flag for them):
	// floor = max(MinLocalShare, FloorFraction / processes). Defaults 0.02
	// and 0.25.
	MinLocalShare, FloorFraction float64

	// PrivatePostgres starts a private Postgres server (which StopPostgres
	// can stop) instead of a fresh database on the machine's server.
	PrivatePostgres bool

	// ExampleRegion, when set, names a region whose processes are the
	// example service (examples/weighted-api, a Go API embedding a
	// participant) instead of the daemon: clients call the service's own
	// endpoints (GET /v1/quotes/{symbol} for "quote", POST /v1/reports for
	// "report": Traffic.Endpoints must be those two), and the harness
	// reads its operator routes with AdminToken as its --read-token. It
	// may not be the first region (the control plane is a daemon there);
	// ExtraFlags and ShutdownDelay are the daemon's and do not reach it.
	// Default "": every process is the daemon.
	ExampleRegion string

	// GRPC: every daemon also serves Envoy's rate limit service on its own
	// --grpc-listen port (Node.GRPCAddr), for Traffic.GRPC; its rules come
	// from ExtraFlags (--rls-config; the harness's gRPC test uses
	// catalog: and SetRLS). Default false.
	GRPC bool

	// AdminToken is the control-plane token. Default "multiregion-admin".
	AdminToken string
	// BillingToken, when set, is the reconciler's billing token: it serves
	// GET /v1/usage to it (QUOTA_BILLING_TOKEN, in the environment as the
	// deploy passes it). Default "": /v1/usage answers 503.
	BillingToken string
	// ExtraFlags are appended to every limiter's command line.
	ExtraFlags []string
	// ReconcilerFlags are appended to the reconciler's serve command line.
	ReconcilerFlags []string
	// StartTimeout bounds the wait for everything to be up. Default 90s.
	StartTimeout time.Duration
}

// DefaultSpec returns the documented defaults.
func DefaultSpec() Spec {
	return Spec{
		Regions:        []string{"eu", "us", "ap"},
		Processes:      2,
		Weights:        map[string]float64{"eu": 0.5, "us": 0.3, "ap": 0.2},
		CrossRegionRTT: 80 * time.Millisecond,
		Window:         10 * time.Second,
		ReportInterval: time.Second,
		GossipInterval: 200 * time.Millisecond,
		StoreTimeout:   20 * time.Millisecond,
		ShareFloor:     0.05,
		MinLocalShare:  0.02,
		FloorFraction:  0.25,
		AdminToken:     "multiregion-admin",
		StartTimeout:   90 * time.Second,
	}
}

func (s *Spec) validate() error {
	if len(s.Regions) < 2 {
		return fmt.Errorf("multiregion: spec Regions: need at least 2, got %v", s.Regions)
	}
	seen := map[string]bool{}
	for _, r := range s.Regions {
		if r == "" || strings.ContainsAny(r, " ,=") || seen[r] {
			return fmt.Errorf("multiregion: spec Regions: bad or repeated name %q", r)
		}
		seen[r] = true
	}
	if s.Processes < 1 {
		return fmt.Errorf("multiregion: spec Processes: must be at least 1, got %d", s.Processes)
	}
	sum := 0.0
	for _, r := range s.Regions {
		w, ok := s.Weights[r]
		if !ok || w <= 0 {
			return fmt.Errorf("multiregion: spec Weights: region %s needs a positive weight", r)
		}
		sum += w
	}
	if math.Abs(sum-1) > 1e-6 {
		return fmt.Errorf("multiregion: spec Weights: must sum to 1, got %v", sum)
	}
	if s.Window <= 0 || s.ReportInterval <= 0 || s.GossipInterval <= 0 || s.StoreTimeout <= 0 || s.StartTimeout <= 0 {
		return fmt.Errorf("multiregion: spec durations must be positive")
	}
	if s.ShutdownDelay < 0 {
		return fmt.Errorf("multiregion: spec ShutdownDelay: must not be negative, got %v", s.ShutdownDelay)
	}
	if s.ExampleRegion != "" && (!seen[s.ExampleRegion] || s.ExampleRegion == s.Regions[0]) {
		return fmt.Errorf("multiregion: spec ExampleRegion: %q must be one of Regions other than the first (the control region), %v", s.ExampleRegion, s.Regions)
	}
	if s.AdminToken == "" {
		return fmt.Errorf("multiregion: spec AdminToken: must not be empty")
	}
	return nil
}

// weightsFlag renders Weights as --region-weights.
func (s *Spec) weightsFlag() string {
	names := append([]string(nil), s.Regions...)
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, r := range names {
		parts = append(parts, fmt.Sprintf("%s=%g", r, s.Weights[r]))
	}
	return strings.Join(parts, ",")
}

// DegradedFloor is the degraded-mode floor of one process's local share:
// max(MinLocalShare, FloorFraction / processes).
func (s *Spec) DegradedFloor() float64 {
	return math.Max(s.MinLocalShare, s.FloorFraction/float64(s.Processes))
}

// DegradedFactor bounds Σ over a region's processes of max(local share,
// floor), given that local shares sum to 1: 1 + (processes − 1) × floor
// (all traffic on one process, the others at their floor).
func (s *Spec) DegradedFactor() float64 {
	return 1 + float64(s.Processes-1)*s.DegradedFloor()
}
