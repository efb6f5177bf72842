package multiregion

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// controlNode is the control-plane limiter (Node.ControlPlane): the only
// process whose NATS user may write the catalogue, so every control-plane
// write of the harness goes to it. While it restarts, put retries.
func (c *Cluster) controlNode() *Node {
	n := c.Node(c.order[0], 0)
	if n.Crashed() {
		c.t.Fatalf("multiregion: the control-plane limiter %s is crashed: no catalogue write or control read is possible", n.Name())
	}
	return n
}

// put sends an authorised control-plane PUT of body as JSON, retrying 503
// (catalogue briefly unreachable) until timeout.
func (c *Cluster) put(path string, body any, timeout time.Duration) {
	c.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		c.t.Fatal(err)
	}
	c.putRaw(path, "application/json", b, timeout)
}

// putRaw sends an authorised control-plane PUT of body, retrying 503
// until timeout; any other failure fails the test.
func (c *Cluster) putRaw(path, contentType string, body []byte, timeout time.Duration) {
	c.t.Helper()
	testserver.WaitFor(c.t, timeout, 100*time.Millisecond, func() error {
		req, err := http.NewRequest(http.MethodPut, c.controlNode().URL()+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.spec.AdminToken)
		req.Header.Set("Content-Type", contentType)
		resp, err := c.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		switch {
		case resp.StatusCode/100 == 2:
			return nil
		case resp.StatusCode == http.StatusServiceUnavailable:
			return fmt.Errorf("PUT %s: %s %s", path, resp.Status, msg)
		}
		c.t.Fatalf("multiregion: PUT %s: %s %s", path, resp.Status, msg)
		return nil
	})
}

// PutTo sends one authorised control-plane PUT to node n and returns its
// status: only the control-plane limiter may write the catalogue, the
// others answer 403.
func (c *Cluster) PutTo(n *Node, path string, body any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(http.MethodPut, n.URL()+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.spec.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// SetPlan creates or changes a plan through the control-plane API.
func (c *Cluster) SetPlan(plan string, rate, capacity float64) {
	c.t.Helper()
	c.put("/v1/limits/"+url.PathEscape(plan), map[string]float64{"rate": rate, "capacity": capacity}, 30*time.Second)
}

// AssignKey puts key on plan.
func (c *Cluster) AssignKey(key, plan string) {
	c.t.Helper()
	c.put("/v1/keys/"+url.PathEscape(key), map[string]string{"plan": plan}, 30*time.Second)
}

// SetCost sets an endpoint's cost weight.
func (c *Cluster) SetCost(endpoint string, cost int64) {
	c.t.Helper()
	c.put("/v1/costs/"+url.PathEscape(endpoint), map[string]int64{"cost": cost}, 30*time.Second)
}

// WaitPlan waits until every live node resolves each key to a plan of the
// given rate and capacity: the push of the catalogue has converged.
func (c *Cluster) WaitPlan(timeout time.Duration, rate, capacity float64, keys ...string) {
	c.t.Helper()
	c.WaitPlanFields(timeout, PlanFields{Rate: rate, Capacity: capacity}, keys...)
}

// WaitConverged waits until every live node runs the same catalogue
// version (per its /metrics) and, for each key given, the regions' shares
// (per /debug/shares of each region's nodes) agree within a region and sum
// to 1 across regions within 2 %.
func (c *Cluster) WaitConverged(timeout time.Duration, keys ...string) {
	c.t.Helper()
	testserver.WaitFor(c.t, timeout, 100*time.Millisecond, func() error {
		if err := c.configConverged(); err != nil {
			return err
		}
		if !c.GossipWired() {
			return nil
		}
		for _, k := range keys {
			sh, err := c.Shares(k)
			if err != nil {
				return err
			}
			sum := 0.0
			for _, r := range c.order {
				sum += sh[r]
			}
			if math.Abs(sum-1) > 0.02 {
				return fmt.Errorf("key %s: shares %v sum to %.3f", k, sh, sum)
			}
		}
		return nil
	})
}

// GossipWired reports whether the daemons serve /debug/shares.
func (c *Cluster) GossipWired() bool {
	for _, n := range c.Nodes() {
		if !n.Crashed() {
			_, err := c.sharesOf(n, "probe")
			return !errors.Is(err, errGossipOff)
		}
	}
	return false
}

// configConverged compares the catalogue version metric of every live node.
func (c *Cluster) configConverged() error {
	var first float64
	seen := false
	for _, n := range c.Nodes() {
		if n.Crashed() {
			continue
		}
		m, err := c.Metrics(n)
		if err != nil {
			return err
		}
		v, ok := m.first(configVersionMetrics...)
		if !ok {
			return nil // the daemon exports no version: nothing to compare
		}
		if seen && v != first {
			return fmt.Errorf("catalogue versions differ: %v on %s vs %v", v, n.Name(), first)
		}
		first, seen = v, true
	}
	return nil
}

// Shares returns, per region, the share of key that the region's first
// live node reports on /debug/shares. Nodes of one region must agree within
// 0.01 (they read the same gossip), else it is an error.
func (c *Cluster) Shares(key string) (map[string]float64, error) {
	out := make(map[string]float64, len(c.order))
	for _, r := range c.order {
		got := false
		for _, n := range c.regions[r].Nodes() {
			if n.Crashed() {
				continue
			}
			s, err := c.NodeShare(n, key)
			if err != nil {
				return nil, err
			}
			if got && math.Abs(s-out[r]) > 0.01 {
				return nil, fmt.Errorf("region %s: nodes disagree on key %s share: %v vs %v", r, key, s, out[r])
			}
			out[r], got = s, true
		}
	}
	return out, nil
}

func getJSONWith(client *http.Client, u, token string, v any) error {
	resp, err := getWithToken(client, u, token)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", u, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

// getWithToken GETs u with "Authorization: Bearer <token>": the daemon's
// reads (GET /v1/keys, /debug/shares) need a read or the admin token.
func getWithToken(client *http.Client, u, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return client.Do(req)
}
