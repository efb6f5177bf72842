package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/internal/settings"
	"github.com/quotaplatform/quota/internal/tracing"
	"github.com/quotaplatform/quota/membership"
)

// declare declares every setting of the daemon on o, once: its flag, its
// default, its help and docs (the table in README.md, "Flags", is
// generated from these: TestSettingsTable), and the check of its value
// alone. Checks across settings are in Options.validate.
func declare(o *Options) *settings.Set {
	// A flag bound to a field of the participant's Options takes its
	// default from the field (participant.DefaultOptions, and the limiter's
	// and reporter's DefaultConfig under it) and is checked by the field's
	// owner (Field: participant.Options.Validate).
	s := settings.New("regional-limiter", envPrefix)
	s.String(&o.Region, "region", o.Region, "region name").Field("Region")
	s.String(&o.Listen, "listen", ":8080", "HTTP listen address").
		Doc("HTTP address").
		Check(func() error { return nonEmpty(o.Listen) })
	s.String(&o.GRPCListen, "grpc-listen", "", "gRPC address of Envoy's rate limit service (envoy.service.ratelimit.v3), with health and reflection; empty = off").
		Doc("gRPC address of Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), with gRPC health and reflection; empty = off. Needs `--rls-config`. With `--check-token`, every gRPC method needs `authorization: Bearer <check token>` metadata (Unauthenticated without, PermissionDenied with another); probes use `/readyz`")
	s.String(&o.RLSConfig, "rls-config", "", "envoyproxy/ratelimit configuration YAML for --grpc-listen: a file, or a directory of *.yaml files, reloaded on change; or catalog: for the domains stored in the catalogue (PUT /v1/rls/{domain}), pushed to every process").
		Doc("envoyproxy/ratelimit configuration YAML: a file, or a directory whose `*.yaml`/`*.yml` files each hold one domain. Checked every second and reloaded on change; an invalid one stops the start, and on reload is logged (file, line, field) while the last good one stays. `catalog:` takes the domains stored in the catalogue instead (`PUT /v1/rls/{domain}`, \"Control plane\"), re-applied on every push, each domain keeping its last good rules; they are in the last known good cache file too. Its limits are keys `rls:…` (see docs/migrating.md)")
	s.Bool(&o.RLSResponseHeaders, "rls-response-headers", false, "rate limit service answers carry RateLimit-*, X-RateLimit-* and RateLimit-Policy response headers").
		Doc("rate limit service answers carry `RateLimit-Limit`/`-Remaining`/`-Reset`, `X-RateLimit-*` (`X-RateLimit-Degraded` when decided without the store), `RateLimit` and `RateLimit-Policy` for Envoy to add to the response")
	s.String(&o.Redis, "redis", "", "Redis URL (redis://[:password@]host:port/db, rediss:// for TLS); empty = in-process store").
		Doc("`redis://[:password@]host:port/db`, `rediss://` for TLS; empty = in-process store")
	s.Bool(&o.RedisCluster, "redis-cluster", false, "treat --redis as a comma-separated list of Redis Cluster seed URLs").
		Doc("`--redis` is a comma-separated list of cluster seed URLs").Field("RedisCluster")
	s.String(&o.NATSURL, "nats", "", "NATS URL (comma-separated list allowed); empty = embedded NATS server with JetStream in --data-dir").
		Doc("NATS URL(s); empty = embedded NATS with JetStream in `--data-dir`")
	s.String(&o.NATSAuth.User, "nats-user", "", "NATS user: limiter-<region>.<process-id> (its own), limiter-<region> (its region's), or control-plane with --control-plane; needs --nats-password").
		Doc("the NATS user of this process: `limiter-<region>.<process-id>` where the NATS configuration lists the process, else its region's `limiter-<region>`, or `control-plane` with `--control-plane`; needs `--nats-password`. Only with `--nats` (the embedded server has no users)")
	s.Var(&o.NATSAuth.Password, "nats-password", "password of --nats-user (use the environment: QUOTA_NATS_PASSWORD)").
		Doc("password of `--nats-user`: give it in the environment (`QUOTA_NATS_PASSWORD`), never on the command line")
	s.String(&o.NATSAuth.Creds, "nats-creds", "", "NATS credentials file (JWT auth), instead of --nats-user")
	s.String(&o.NATSAuth.TLSCA, "nats-tls-ca", "", "NATS TLS CA certificate file")
	s.String(&o.NATSAuth.TLSCert, "nats-tls-cert", "", "NATS TLS client certificate file")
	s.String(&o.NATSAuth.TLSKey, "nats-tls-key", "", "NATS TLS client key file")
	s.Bool(&o.ControlPlane, "control-plane", false, "this process writes the catalogue (its NATS user needs the control-plane role); always on with embedded NATS").
		DefaultDoc("`false` (`true` with embedded NATS)").
		Doc("this process writes the catalogue: `PUT`/`DELETE` of `/v1/limits`, `/v1/keys`, `/v1/costs`. Without it a limiter on `--nats` answers those with 403, naming the control plane, never creates the catalogue bucket (it waits for the control plane to), and still reads. Its NATS user must hold the control-plane role")
	s.Int(&o.Ledger.Stream.Replicas, "usage-stream-replicas", o.Ledger.Stream.Replicas, "replicas of the usage stream when this process creates it: only with embedded NATS (elsewhere the reconciler creates it, and usage waits in the spool until it exists)").
		Doc("the usage stream's replicas (1–5) when this process creates it, which it does only on its embedded NATS (elsewhere the reconciler creates it, and usage waits in the spool until it exists); an existing stream is never changed").
		Field("Ledger.Stream.Replicas")
	s.Int64(&o.Ledger.Stream.MaxBytes, "usage-stream-max-bytes", o.Ledger.Stream.MaxBytes, "byte limit of the usage stream when this process creates it (embedded NATS only); a full stream refuses new reports, which wait in the spool").
		Doc("the usage stream's byte limit when this process creates it (embedded NATS only). A full stream refuses new reports (they wait in the spool: `quota_ledger_publish_errors_total` rises), it never drops old ones").
		Field("Ledger.Stream.MaxBytes")
	s.String(&o.Ledger.Stream.Cluster, "usage-stream-cluster", "", "the NATS cluster (region name) the usage stream is placed in when this process creates it (embedded NATS only); empty = where this process is connected").
		Doc("the NATS cluster (region name) the usage stream is placed in when this process creates it; empty = the cluster this process is connected to; a NATS that is not clustered (the embedded server) ignores it. " + placementDoc).
		Field("Ledger.Stream.Cluster")
	s.Int(&o.CatalogReplicas, "catalog-replicas", o.CatalogReplicas, "replicas of the catalogue bucket when this process creates it").
		Doc("the catalogue bucket's replicas (1–5) when this process (the control plane) creates it").
		Field("CatalogReplicas")
	s.String(&o.CatalogCluster, "catalog-cluster", "", "the NATS cluster (region name) the catalogue bucket is placed in when this process creates it; the deploy sets the ledger region; empty = where this process is connected").
		Doc("the NATS cluster (region name) the catalogue bucket is placed in when this process creates it; the deploy sets the ledger region. Empty = the cluster this process is connected to. " + placementDoc).
		Field("CatalogCluster")
	s.String(&o.DataDir, "data-dir", o.DataDir, "data directory: embedded NATS store, catalogue cache, usage spool").
		Doc("embedded NATS store, catalogue cache, usage spool").Field("DataDir")
	s.Var(&o.AdminToken, "admin-token", "control-plane bearer token (writes and reads); empty disables control-plane writes").
		Doc("bearer token for control-plane writes (and reads); empty = writes refused (403)")
	s.Var(&o.CheckToken, "check-token", "bearer tokens of POST /v1/allow and /v1/allow/batch, comma-separated (rotation); empty leaves the check API open").
		Doc("bearer tokens of `/v1/allow`, `/v1/allow/batch`, `/v1/refund`, `/v1/charge`, `/v1/acquire` and `/v1/release`, comma-separated (rotation), each 16–256 bytes of printable ASCII other than `,`; empty = the check API is open").
		Check(func() error { return tokenList(string(o.CheckToken)) })
	s.Var(&o.ReadToken, "read-token", "bearer tokens for reads (GET /v1/keys, /v1/limits, /v1/costs, ?history=1, /debug/), comma-separated; the admin token reads too").
		Doc("bearer tokens for reads (`GET /v1/…`, `?history=1`, `/debug/`), same format; the admin token reads too; none of either = reads refused (403)").
		Check(func() error { return tokenList(string(o.ReadToken)) })
	s.Duration(&o.ShutdownDelay, "shutdown-delay", settings.DefaultShutdownDelay, "on SIGTERM, fail /readyz and keep serving this long before closing the listener").
		Doc("on SIGTERM, `/readyz` fails and the daemon keeps serving this long before closing its listener (0 to 5m)").
		Check(func() error { return shutdownBudget(o.ShutdownDelay, 0) })
	s.Duration(&o.DrainTimeout, "drain-timeout", 10*time.Second, "at shutdown, after --shutdown-delay, how long the HTTP requests in flight and then the gRPC calls may take to finish (each); past it they are cut").
		Doc("at shutdown, after `--shutdown-delay`, the HTTP requests (then the gRPC calls) in flight get this long each to finish; past it they are cut (at most 5m)").
		Check(func() error { return shutdownBudget(o.DrainTimeout, time.Nanosecond) })
	s.Duration(&o.FlushTimeout, "flush-timeout", o.FlushTimeout, "at shutdown, after the listeners are drained, the budget of the limiter's last flush and the final usage reports (to JetStream, or the spool): never spent by the drains").
		Doc("at shutdown, after the listeners are drained, the limiter's last flush and the final usage reports (to JetStream, or the spool) get this long of their own: never spent by the drains (at most 5m)").
		Field("FlushTimeout").
		Check(func() error {
			return want(o.FlushTimeout <= maxShutdownDelay, "must be at most %v, got %v", maxShutdownDelay, o.FlushTimeout)
		})
	s.String(&o.ProcessID, "process-id", o.ProcessID, "process identity in usage reports").
		DefaultDoc("host-pid").Field("ProcessID")
	s.Duration(&o.Limiter.Window, "window", o.Limiter.Window, "accounting window").Field("Limiter.Window")
	s.Duration(&o.Ledger.ReportInterval, "report-interval", o.Ledger.ReportInterval, "usage report interval").
		Doc("usage report interval (ledger)").Field("Ledger.ReportInterval")
	s.Duration(&o.Limiter.StoreTimeout, "store-timeout", o.Limiter.StoreTimeout, "hard timeout of one store call").
		Field("Limiter.StoreTimeout")
	s.Int(&o.Limiter.ProcessEstimate, "processes", o.Limiter.ProcessEstimate, "estimate of the limiter processes sharing the region's store").
		Field("Limiter.ProcessEstimate")
	s.Int(&o.GCPercent, "gc-percent", defaultGCPercent, "the garbage collector's GOGC: collect when the heap has grown this many percent since the last collection (Go's default is 100); fewer collections shorten the check latency's tail for more memory, bounded by GOMEMLIMIT; GOGC in the environment wins").
		Doc("the garbage collector's GOGC (10 to 10000): a collection when the heap has grown this many percent since the last (Go's default is 100). Fewer collections shorten the check latency's tail (p99 3.3–3.4 ms against 4.5–5.8 ms at 100, p99.9 8–11 ms against 19–25 ms, docs/performance.md) for a heap up to 5× its live size between collections, bounded by `GOMEMLIMIT`; `GOGC` in the environment wins").
		Check(func() error {
			return want(o.GCPercent >= 10 && o.GCPercent <= 10_000, "must be in [10, 10000], got %d", o.GCPercent)
		})
	s.Duration(&o.Limiter.IdempotencyHorizon, "idempotency-horizon", o.Limiter.IdempotencyHorizon, "how long the region's store remembers a request_id (checks, refunds, charges): the same id within it is charged once").
		Doc("how long the region's store remembers a `request_id` (checks, refunds, charges) after its last use: the same id within it is charged once (at least `1ms`; docs/plans.md, \"Request ids, refunds and charges\")").
		Field("Limiter.IdempotencyHorizon")
	s.Duration(&o.GossipInterval, "gossip-interval", o.GossipInterval, "cross-region demand gossip interval").
		Field("GossipInterval")
	// --regions and --region-weights are checked together (regionSet).
	s.String(&o.RegionList, "regions", "", "every region sharing limits over gossip, comma-separated, this one included; default: the regions of --region-weights, or --region alone with embedded NATS (required with --nats otherwise)").
		DefaultDoc("see right").
		Doc("every region sharing limits over gossip, comma-separated, this one included (`eu,us,ap`); shares are split over exactly these, and digests from any other region are refused. Default: the regions of `--region-weights`; with neither flag, `--region` alone when NATS is embedded (`make run`), and **an error with `--nats`** (its servers may be joined to other regions': a limiter that knew only its own region would take every key's whole limit), so a single-region deployment on a NATS server passes `--regions <its region>`. Given both flags, they must name the same regions; `--region` must be one of them")
	s.String(&o.RegionWeightList, "region-weights", "", "historical region weights, e.g. eu=0.5,us=0.3,ap=0.2 (one for every region of --regions)").
		Doc("historical region weights for a cold start, e.g. `eu=0.5,us=0.3,ap=0.2`: one for every region of `--regions`, or none (equal)")
	s.Float64(&o.ShareFloor, "share-floor", o.ShareFloor, "smallest share of a key's limit a region keeps").
		Field("ShareFloor")
	s.String(&o.MemberlistBind, "memberlist-bind", "", "memberlist host:port; empty = membership off").
		Doc("in-region membership: memberlist's host:port; empty = membership off").Field("MemberlistBind")
	s.String(&o.MemberlistJoinList, "memberlist-join", "", "comma-separated memberlist host:port to join").
		Field("MemberlistJoin")
	s.Var(&o.MemberlistKey, "memberlist-key", "memberlist encryption key: base64 of 16, 24 or 32 bytes; comma-separated for rotation (the first encrypts, all decrypt); empty = plaintext").
		Doc("memberlist encryption: base64 (standard, padded) of 16, 24 or 32 bytes (AES-128/192/256), e.g. `head -c 32 /dev/urandom \\| base64`; comma-separated for rotation (the first encrypts, all decrypt: add the new key second, then move it first, then drop the old one). Every process of a region needs a shared key: one without it cannot join and is not counted. Pass it as `QUOTA_MEMBERLIST_KEY` from a secret; it never prints. Empty = plaintext (a warning at start)").
		Check(func() error {
			_, err := membership.ParseKeys(string(o.MemberlistKey))
			return err
		}).
		Field("MemberlistKeys")
	s.String(&o.LogLevel, "log-level", settings.DefaultLogLevel, "log level: debug, info, warn, error").
		Doc("`debug`, `info`, `warn`, `error`; logs are JSON (log/slog) on stderr").
		Check(func() error {
			var lvl slog.Level
			return want(lvl.UnmarshalText([]byte(o.LogLevel)) == nil, "must be debug, info, warn or error, got %q", o.LogLevel)
		})
	s.Float64(&o.DefaultPlan.Rate, "default-rate", 100, "built-in default plan rate (cost units per second) for keys with no plan while the catalogue has no \"default\" plan; 0 disables; off with --redis unless given").
		Doc("the built-in default plan's rate (cost units per second), for keys with no plan while the catalogue has no `default` plan; `--default-rate` and `--default-capacity` both 0 = none; with `--redis`, none unless either is given").
		Field("DefaultPlan.Rate")
	s.Float64(&o.DefaultPlan.Capacity, "default-capacity", 200, "built-in default plan capacity (burst, cost units); 0 disables; off with --redis unless given").
		Doc("the built-in default plan's capacity (burst, cost units); 0 with `--default-rate` 0 = none; with `--redis`, none unless either is given").
		Field("DefaultPlan.Capacity")
	s.String(&o.Config, "config", "", "optional `file` of flag = value lines, read after flags and environment").
		Doc("the config file above; a `config` line inside it is ignored")
	s.Duration(&o.Limiter.ClockOffset, "clock-skew", o.Limiter.ClockOffset, "testing: offset this process's wall clock by this much").
		Doc("testing only: offset this process's wall clock (the multi-region harness's clock-skew scenario)")
	s.String(&o.UsageEncoding, "usage-encoding", usageEncodingName(o.Ledger.Encoding), "how usage reports travel to the ledger: batch (many per message, compressed) or json (one per message, all a reconciler older than batches reads; upgrade reconcilers first)").
		Doc("how usage reports travel to the ledger stream: `batch` (many reports per message, compressed: `ledger.EncodeBatch`) or `json` (one report per message, all that a reconciler older than batches reads). Upgrade reconcilers first, or run limiters with `json` until they are").
		Check(func() error {
			_, ok := usageEncodings[o.UsageEncoding]
			return want(ok, "must be batch or json, got %q", o.UsageEncoding)
		})
	s.Int(&o.HotKeyMetrics, "hotkey-metrics", o.HotKeyMetrics, "export the fleet's hottest keys' demand share, admitted rate and this region's share on /metrics, this many by rank (no key in a label; GET /v1/hotkeys names them); 0 to 100").
		Doc("export the fleet's hottest keys (from the gossip digests) on `/metrics` by rank, this many (0–100): `quota_hotkey_demand_share{rank}`, `quota_hotkey_admitted_rate{rank}`, `quota_hotkey_region_share{rank}`. No key is in a label (`/metrics` is open); `GET /v1/hotkeys` names them").
		Field("HotKeyMetrics")
	s.String(&o.OTLPEndpoint, "otlp-endpoint", "", "OTLP/HTTP collector URL for traces of the slow work (catalogue writes and pushes, report publishing, and a check's store call in the trace of a caller that sent a sampled traceparent), e.g. http://otel-collector:4318; empty: tracing off").
		Doc("OTLP/HTTP collector URL (e.g. `http://otel-collector:4318`) for traces of the slow work: report publishing (`quota.ledger.flush`), and a check's store call (`quota.store.call`) in the trace of a caller that sent a sampled `traceparent`. Empty: tracing off, at no cost. The reconciler has the same flag (`quota.reconcile.batch`, `quota.reconcile.write`)").
		Check(func() error { return tracing.CheckEndpoint(o.OTLPEndpoint) })
	return s
}

// placementDoc is the docs of the placement flags' shared rules.
const placementDoc = "A NATS cluster name: no spaces, dots or wildcards (`*`, `>`). An existing stream or bucket is never moved or downgraded: when its replicas or cluster differ from this process's `--…-replicas` and `--…-cluster`, the process (for the bucket, the control plane) logs what differs once, at info, and leaves it"

// want is nil when ok, else the error of format and args: the check of a
// setting in one line.
func want(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func nonEmpty(v string) error { return want(v != "", "must not be empty") }

// shutdownBudget checks a shutdown step's budget: at least lowest (0 or
// positive) and at most maxShutdownDelay.
func shutdownBudget(d, lowest time.Duration) error {
	if lowest == 0 {
		return want(d >= 0 && d <= maxShutdownDelay, "must be 0 to %v, got %v", maxShutdownDelay, d)
	}
	return want(d >= lowest && d <= maxShutdownDelay, "must be positive and at most %v, got %v", maxShutdownDelay, d)
}

// tokenList checks a list of bearer tokens (bearer.ParseList).
func tokenList(list string) error {
	_, err := bearer.ParseList(list)
	return err
}
