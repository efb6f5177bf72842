package multiregion

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/rls"
)

// Envoy's rate limit service in the harness (Spec.GRPC, Traffic.GRPC).
//
// A scenario over gRPC keeps the HTTP scenarios' bookkeeping: its keys are
// the limiter keys that the service spends from (GRPCKey: rls.Key of the
// matched rule, "rls:<rule>:<domain>:<key>=<value>"), which are the keys
// the ledger holds, so the clients' record, the accuracy figures and the
// ledger comparison all count the same keys. The generator reads each key
// back into the descriptor it sends (descriptorOf) and sends its cost as
// the request's hits_addend; a descriptor status OK is an allowed check,
// OVER_LIMIT a rejected one, and the response header X-Ratelimit-Degraded
// (--rls-response-headers) flags a decision taken without the store, as
// the check API's answer does.

// GRPCKey is the limiter key that the rate limit service spends from for a
// request descriptor of domain with the one entry (key, value), under cfg
// (the rules the daemons serve). The key must read back into the
// descriptor: an error when no limited rule matches it or it would be
// hashed (over 256 bytes, rls.Key).
func GRPCKey(cfg *rls.Config, domain, key, value string) (string, error) {
	entries := []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}
	k, ok := cfg.Key(domain, entries)
	if !ok {
		return "", fmt.Errorf("multiregion: descriptor %s=%s of domain %s: no limited rule matches it", key, value, domain)
	}
	if d, e, err := descriptorOf(k); err != nil || d != domain || len(e) != 1 || e[0].Key != key || e[0].Value != value {
		return "", fmt.Errorf("multiregion: limiter key %q does not read back into descriptor %s=%s of domain %s (%v)", k, key, value, domain, err)
	}
	return k, nil
}

// descriptorOf reads a limiter key of rls.Key back into its domain and
// entries: "rls:<rule>:<domain>:<key>=<value>,…", each part
// percent-encoded. A hashed key cannot be read back.
func descriptorOf(k string) (string, []*rlv3.RateLimitDescriptor_Entry, error) {
	rest, ok := strings.CutPrefix(k, rls.KeyPrefix)
	if !ok {
		return "", nil, fmt.Errorf("multiregion: key %q is not a rate limit service key (%s…): Traffic.GRPC sends only those", k, rls.KeyPrefix)
	}
	parts := strings.SplitN(rest, ":", 3)
	if len(parts) != 3 || strings.HasPrefix(parts[2], "#") {
		return "", nil, fmt.Errorf("multiregion: rate limit service key %q has no readable descriptor", k)
	}
	domain, err := url.PathUnescape(parts[1])
	if err != nil {
		return "", nil, fmt.Errorf("multiregion: key %q: domain: %w", k, err)
	}
	var entries []*rlv3.RateLimitDescriptor_Entry
	for _, pair := range strings.Split(parts[2], ",") {
		ek, ev, ok := strings.Cut(pair, "=")
		if !ok {
			return "", nil, fmt.Errorf("multiregion: key %q: entry %q has no '='", k, pair)
		}
		if ek, err = url.PathUnescape(ek); err == nil {
			ev, err = url.PathUnescape(ev)
		}
		if err != nil {
			return "", nil, fmt.Errorf("multiregion: key %q: entry %q: %w", k, pair, err)
		}
		entries = append(entries, &rlv3.RateLimitDescriptor_Entry{Key: ek, Value: ev})
	}
	return domain, entries, nil
}

// GRPCAddr is the node's --grpc-listen address ("" without Spec.GRPC).
func (n *Node) GRPCAddr() string { return n.grpcListen }

// grpcConns are the harness's client connections, one per --grpc-listen
// address, closed when the test that opened them ends. A connection
// outlives its node's restarts (the address is the node's for the
// cluster's life): gRPC reconnects by itself.
var grpcConns struct {
	sync.Mutex
	m map[string]*grpc.ClientConn // guarded by the mutex
}

// grpcClient is a rate limit service client of n.
func (n *Node) grpcClient() (rlsv3.RateLimitServiceClient, error) {
	if n.grpcListen == "" {
		return nil, fmt.Errorf("multiregion: %s serves no gRPC (Spec.GRPC is off, or it is the example service)", n.Name())
	}
	grpcConns.Lock()
	defer grpcConns.Unlock()
	if conn, ok := grpcConns.m[n.grpcListen]; ok {
		return rlsv3.NewRateLimitServiceClient(conn), nil
	}
	conn, err := grpc.NewClient(n.grpcListen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("multiregion: %s: gRPC client: %w", n.Name(), err)
	}
	if grpcConns.m == nil {
		grpcConns.m = map[string]*grpc.ClientConn{}
	}
	grpcConns.m[n.grpcListen] = conn
	addr := n.grpcListen
	n.c.t.Cleanup(func() {
		grpcConns.Lock()
		delete(grpcConns.m, addr)
		grpcConns.Unlock()
		conn.Close()
	})
	return rlsv3.NewRateLimitServiceClient(conn), nil
}

// grpcTimeout bounds one ShouldRateLimit, as the HTTP client's timeout
// bounds one check.
const grpcTimeout = 5 * time.Second

// grpcAnswer is one descriptor's answer.
type grpcAnswer struct {
	allowed  bool
	degraded string // X-Ratelimit-Degraded: the failure policy; "" when the store decided
	limit    uint32 // requests_per_unit in force
}

// shouldRateLimit sends the check of key with cost to n as one
// ShouldRateLimit of one descriptor.
func shouldRateLimit(ctx context.Context, n *Node, key string, cost int64) (grpcAnswer, error) {
	client, err := n.grpcClient()
	if err != nil {
		return grpcAnswer{}, err
	}
	domain, entries, err := descriptorOf(key)
	if err != nil {
		return grpcAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, grpcTimeout)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      domain,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries}},
		HitsAddend:  uint32(cost),
	})
	if err != nil {
		return grpcAnswer{}, fmt.Errorf("ShouldRateLimit %s: %w", key, err)
	}
	if len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit == nil {
		return grpcAnswer{}, fmt.Errorf("ShouldRateLimit %s: no limit applied (is the rule in force?): %v", key, resp)
	}
	st := resp.Statuses[0]
	a := grpcAnswer{allowed: st.Code == rlsv3.RateLimitResponse_OK, limit: st.CurrentLimit.RequestsPerUnit}
	for _, h := range resp.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, httplimit.HeaderDegraded) {
			a.degraded = h.Value
		}
	}
	return a, nil
}

// sendGRPC sends checks to n over gRPC, one ShouldRateLimit each, and
// records them as send records HTTP checks.
func (g *Generator) sendGRPC(n *Node, checks []check) {
	id := n.ID()
	for _, ch := range checks {
		t0 := time.Now()
		a, err := shouldRateLimit(context.Background(), n, ch.key, ch.cost)
		lat := time.Since(t0)
		if err != nil {
			g.rec.fail(n.Region, id, 1, err, !n.serving())
			continue
		}
		g.rec.latency(lat, 1)
		g.rec.decision(ch, n.Region, id, a.allowed, a.degraded != "")
		if g.tr.Observe != nil {
			at := t0.Sub(g.start)
			g.tr.Observe(Observed{Key: ch.key, Region: n.Region, Process: id, Cost: ch.cost,
				Allowed: a.allowed, Degraded: a.degraded != "", FailurePolicy: a.degraded, Start: at, End: at + lat})
		}
	}
}

// SetRLS stores yaml as the rules of domain in the catalogue through the
// control-plane limiter (PUT /v1/rls/{domain}), retrying while the
// catalogue is briefly unreachable (503) until timeout. Daemons run with
// --rls-config catalog: get them by push.
func (c *Cluster) SetRLS(domain, yaml string, timeout time.Duration) {
	c.t.Helper()
	c.putRaw("/v1/rls/"+url.PathEscape(domain), "application/yaml", []byte(yaml), timeout)
}

// WaitRLS waits until every live daemon's rate limit service answers for
// the limiter key key (GRPCKey) with requestsPerUnit in force: the push of
// the rules has converged. Each try spends 1 from key on every node, so
// key should be none of a scenario's keys.
func (c *Cluster) WaitRLS(timeout time.Duration, key string, requestsPerUnit uint32) {
	c.t.Helper()
	testserver.WaitFor(c.t, timeout, 50*time.Millisecond, func() error {
		for _, n := range c.Nodes() {
			if n.Crashed() || n.Example {
				continue
			}
			a, err := shouldRateLimit(context.Background(), n, key, 1)
			if err != nil {
				return fmt.Errorf("%s: %w", n.Name(), err)
			}
			if a.limit != requestsPerUnit {
				return fmt.Errorf("%s answers %s with requests_per_unit %d, want %d", n.Name(), key, a.limit, requestsPerUnit)
			}
		}
		return nil
	})
}
