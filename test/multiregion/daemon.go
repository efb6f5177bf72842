package multiregion

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// The daemon's metric names the harness reads. Where the daemon may export
// one of several names, the first that exists is used.
var (
	// configVersionMetrics: the catalogue version a process runs.
	configVersionMetrics = []string{"quota_config_version"}
	// storeCallMetrics: calls to the regional store (Redis), all outcomes.
	storeCallMetrics = []string{"quota_store_calls_total"}
	// decisionMetrics: decisions made (allowed and rejected).
	decisionMetrics = []string{"quota_decisions_total"}
	// decisionLatency: the histogram of the server-side time to serve one
	// check (POST /v1/allow, fast and slow path), in seconds; its _bucket
	// series with the label are read.
	decisionLatency      = "quota_http_request_duration_seconds"
	decisionLatencyLabel = `route="POST /v1/allow"`
	// checkLatency: the server-side time to serve one check by decision
	// path; the fast path's p99 is the asserted decision latency.
	checkLatency     = "quota_check_duration_seconds"
	checkLatencyFast = `path="fast"`
	// shareChangeMetric: share changes the gossip node reported to its limiter.
	shareChangeMetric = "quota_gossip_share_changes_total"
)

// sharesDoc is the part of /debug/shares (the gossip node's snapshot) the
// harness reads: per key, per region, the share of the key's global limit;
// Default for keys without digests.
type sharesDoc struct {
	// Shares answers /debug/shares?key=K: region → share of K.
	Shares  map[string]float64            `json:"shares"`
	Region  string                        `json:"region"`
	Frozen  bool                          `json:"frozen"`
	Default map[string]float64            `json:"default"`
	Keys    map[string]map[string]float64 `json:"keys"`
}

// errGossipOff: the daemon answers /debug/shares with 501, gossip is not
// wired into its build, and every key's share is 1 in every region.
var errGossipOff = errors.New("gossip is not wired into the daemon (/debug/shares answers 501): every region holds share 1")

// sharesOf fetches node n's view of every region's share of key.
func (c *Cluster) sharesOf(n *Node, key string) (map[string]float64, error) {
	var d sharesDoc
	resp, err := getWithToken(c.client, n.URL()+"/debug/shares?key="+url.QueryEscape(key), c.spec.AdminToken)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotImplemented:
		return nil, errGossipOff
	default:
		return nil, fmt.Errorf("%s: GET /debug/shares: %s", n.Name(), resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return nil, fmt.Errorf("%s: /debug/shares: %w", n.Name(), err)
	}
	if len(d.Shares) > 0 {
		return d.Shares, nil
	}
	if m, ok := d.Keys[key]; ok && len(m) > 0 {
		return m, nil
	}
	if len(d.Default) > 0 {
		return d.Default, nil
	}
	return nil, fmt.Errorf("%s: /debug/shares has neither key %s nor defaults", n.Name(), key)
}

// NodeShare is node n's own region's share of key, as n sees it (1 when
// gossip is not wired).
func (c *Cluster) NodeShare(n *Node, key string) (float64, error) {
	m, err := c.sharesOf(n, key)
	if errors.Is(err, errGossipOff) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	s, ok := m[n.Region]
	if !ok {
		return 0, fmt.Errorf("%s: /debug/shares has no share for its region %s", n.Name(), n.Region)
	}
	return s, nil
}
