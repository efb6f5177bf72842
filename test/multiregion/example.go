package multiregion

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// The example service's endpoints (examples/weighted-api), by their names
// in the catalogue: a quote costs what the control plane set for "quote",
// a report what it set for "report".
const (
	exampleQuote  = "quote"
	exampleReport = "report"
	// exampleDegraded is the header the participant's middleware sets on a
	// decision taken without the store: its value is the failure policy.
	exampleDegraded = "X-Ratelimit-Degraded"
)

// exampleRequest is the service's request for one check: the check's key
// as the X-API-Key header, its endpoint as the route. An endpoint the
// service does not have gives a request to a path it answers 404.
func exampleRequest(n *Node, ch check) *http.Request {
	var (
		method = http.MethodGet
		path   = "/v1/quotes/ACME"
		body   io.Reader
	)
	switch ch.endpoint {
	case exampleQuote:
	case exampleReport:
		method, path = http.MethodPost, "/v1/reports"
		body = bytes.NewReader([]byte(`{"symbols":["ACME","GLOBEX","INITECH"]}`))
	default:
		path = "/no-such-endpoint/" + url.PathEscape(ch.endpoint)
	}
	req, _ := http.NewRequest(method, n.URL()+path, body)
	req.Header.Set("X-API-Key", ch.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// sendExample makes one request per check on the example service's own
// endpoints: 200 is an allowed check, 429 a rejected one, and
// X-Ratelimit-Degraded says a decision was taken without the store, under
// which failure policy.
func (g *Generator) sendExample(n *Node, checks []check) {
	id := n.ID()
	for _, ch := range checks {
		t0 := time.Now()
		resp, err := g.client.Do(exampleRequest(n, ch))
		if err != nil {
			g.rec.fail(n.Region, id, 1, err, !n.serving())
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		lat := time.Since(t0)
		if err != nil || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests) {
			g.rec.fail(n.Region, id, 1, fmt.Errorf("%s %s: %s %v %.200s", resp.Request.Method, resp.Request.URL.Path, resp.Status, err, b), !n.serving())
			continue
		}
		allowed := resp.StatusCode == http.StatusOK
		policy := resp.Header.Get(exampleDegraded)
		degraded := policy != ""
		g.rec.latency(lat, 1)
		g.rec.decision(ch, n.Region, id, allowed, degraded)
		if g.tr.Observe != nil {
			at := t0.Sub(g.start)
			g.tr.Observe(Observed{Key: ch.key, Region: n.Region, Process: id, Cost: ch.cost,
				Allowed: allowed, Degraded: degraded, FailurePolicy: policy, Start: at, End: at + lat})
		}
	}
}
